"""Catalogue invariants: names, categories, ABI slots, out-parameters."""

from __future__ import annotations

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.catalogue.functions import ArgKind

from ..every import check_every

REQUIRED_RUNTIME = """cudaMalloc cudaFree cudaMallocHost cudaFreeHost cudaHostAlloc
cudaMallocManaged
cudaMallocAsync cudaFreeAsync cudaMallocPitch cudaMemcpy cudaMemcpyAsync cudaMemcpy2D
cudaMemcpy2DAsync cudaMemcpyPeer cudaMemcpyPeerAsync cudaMemset cudaMemsetAsync cudaMemGetInfo
cudaLaunchKernel cudaLaunchKernelExC cudaLaunchCooperativeKernel cudaGraphLaunch cudaStreamCreate
cudaStreamCreateWithFlags cudaStreamCreateWithPriority cudaStreamDestroy cudaStreamSynchronize
cudaStreamWaitEvent cudaStreamQuery cudaEventCreate cudaEventCreateWithFlags cudaEventRecord
cudaEventSynchronize cudaEventQuery cudaEventElapsedTime cudaEventDestroy cudaGetDevice
cudaSetDevice cudaGetDeviceCount cudaGetDeviceProperties cudaDeviceSynchronize
cudaDeviceReset""".split()


def test_required_runtime_functions_present():
    names = {f.name for f in catalogue.FUNCTIONS if f.api == catalogue.RUNTIME}
    assert set(REQUIRED_RUNTIME) <= names


def test_names_unique_and_categories_known():
    symbols = [s for f in catalogue.FUNCTIONS for s in f.symbols]
    assert len(symbols) == len(set(symbols))
    assert {f.category for f in catalogue.FUNCTIONS} <= set(catalogue.CATEGORIES)


def fits_the_bpf_event(fn: catalogue.Function) -> None:
    assert fn.words <= catalogue.MAX_SLOTS
    assert len(fn.out_index) <= catalogue.MAX_OUTS
    assert 0 <= fn.stack_words <= catalogue.MAX_SLOTS - catalogue.REGISTER_SLOTS
    assert fn.out_mask(8) & fn.out_mask(4) == 0
    outs = [a for a in fn.args if a.is_out]
    assert bin(fn.out_mask(8) | fn.out_mask(4)).count("1") == len(outs)
    assert len({a.name for a in fn.args}) == len(fn.args)


def test_slots_and_outs_fit_the_bpf_event():
    check_every(catalogue.FUNCTIONS, fits_the_bpf_event, lambda fn: fn.name)


def test_launch_kernel_abi_slots():
    fn = catalogue.BY_NAME["cudaLaunchKernel"]
    # func, grid.xy, grid.z, block.xy, block.z, args in registers; smem and stream on the stack
    assert fn.slots == (0, 1, 3, 5, 6, 7)
    assert fn.words == 8 and fn.stack_words == 2


def test_out_parameter_widths():
    assert catalogue.BY_NAME["cudaMalloc"].out_mask(8) == 0b1
    assert catalogue.BY_NAME["cudaGetDeviceCount"].out_mask(4) == 0b1
    assert catalogue.BY_NAME["cudaEventElapsedTime"].out_mask(4) == 0b1
    assert catalogue.BY_NAME["cudaMallocPitch"].out_mask(8) == 0b11
    assert catalogue.BY_NAME["cudaLaunchKernelExC"].config_slot == 0


def test_dim3_that_registers_cannot_hold_goes_on_the_stack_whole():
    # x86-64 System V: a two-word struct with one register left goes on the
    # stack, and the next integer argument still takes that register
    args = tuple(catalogue.Arg(f"a{i}", ArgKind.PTR) for i in range(5))
    fn = catalogue.Function("f", catalogue.RUNTIME, "kernel", args + (
        catalogue.Arg("d", ArgKind.DIM3), catalogue.Arg("n", ArgKind.INT)))
    assert fn.slots == (0, 1, 2, 3, 4, 6, 5)
    assert fn.words == 8 and fn.stack_words == 2


def test_structs_over_16_bytes_and_floats_are_not_captured_but_keep_the_slots_right():
    fn = catalogue.BY_NAME["cudaMemset3D"]  # (cudaPitchedPtr, int, cudaExtent) by value
    assert [a.kind for a in fn.args] == [ArgKind.STACK_STRUCT, ArgKind.INT, ArgKind.STACK_STRUCT]
    assert fn.slots == (-1, 0, -1)
    # cudaMemPrefetchAsync's cudaMemLocation (8 bytes) takes one register
    assert catalogue.BY_NAME["cudaMemPrefetchAsync"].slots == (0, 1, 2, 3, 4)


def test_arguments_past_the_slots_are_marked_not_captured():
    args = tuple(catalogue.Arg(f"a{i}", ArgKind.SIZE) for i in range(14))
    fn = catalogue.Function("f", catalogue.DRIVER, "other", args)
    assert fn.slots == tuple(range(12)) + (-1, -1)
    assert fn.words == 12
