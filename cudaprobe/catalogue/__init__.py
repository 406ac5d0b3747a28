"""What can be traced: every CUDA function as data (functions.py) and the
names of return codes (cuda_errors.py, generated from the toolkit headers);
how functions and symbols are counted wherever they are said (count.py).

The bottom of the data path: imports nothing of cudaprobe but `errors`.
"""
