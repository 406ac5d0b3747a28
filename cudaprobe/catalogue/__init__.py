"""What can be traced: every CUDA function as data (functions.py) and the
names of enum values and return codes (enums.py, from the headers' enums);
how functions and symbols are counted wherever they are said (count.py).

The bottom of the data path: imports nothing of cudaprobe but `errors`.
"""
