/* Built as libtorch_cpu.so: a library with PyTorch's file name that defines
 * none of the autograd functions cudaprobe probes (test_pystacks_autograd.py). */
int not_autograd(int x) { return x + 1; }
