/* Injecting the GPU-time library into a process that is already running
 * (`cudaprobe trace --pid PID --gpu-time`): the frame the injection stub
 * (inject_stub.S) runs on, and the control block the library keeps for
 * cudaprobe (attach.c). cudaprobe reads these #defines from this file
 * (cudaprobe/targets/inject.py): one source for the C, the assembly and
 * the Python. docs/gputime.md says what is done to the process, step by step.
 *
 * The frame: cudaprobe writes it on the stopped thread's stack, below the
 * red zone, sets rsp to it and rip to the stub. The stub saves the vector
 * registers, loads the library from a memfd or calls a function of it,
 * stops twice with a signal the thread ignores (the tracer reads and
 * writes the frame only while the thread is stopped there), restores every
 * register from the frame and returns to where the thread was. */
#ifndef CUDAPROBE_INJECT_H
#define CUDAPROBE_INJECT_H

/* the thread's registers, as they were (R_RSP is where `ret` takes it back) */
#define R_RAX 0x00
#define R_RBX 0x08
#define R_RCX 0x10
#define R_RDX 0x18
#define R_RSI 0x20
#define R_RDI 0x28
#define R_RBP 0x30
#define R_R8 0x38
#define R_R9 0x40
#define R_R10 0x48
#define R_R11 0x50
#define R_R12 0x58
#define R_R13 0x60
#define R_R14 0x68
#define R_R15 0x70
#define R_RFLAGS 0x78
#define F_RETURN 0x80   /* where the original rip is stored: the thread's rsp - 8 - STUB_POP */
#define F_DLOPEN 0x88   /* dlopen, dlsym, dlerror of the process's C library (dlerror may be 0) */
#define F_DLSYM 0x90
#define F_DLERROR 0x98
#define F_FN 0xa0       /* 0: load the library first (memfd, dlopen, dlsym F_SYMBOL); else call it */
#define F_ARG0 0xa8
#define F_ARG1 0xb0
#define F_ARG2 0xb8
#define F_GO 0xc0       /* tracer, at stage 1: 1 load the memfd; anything else: give up */
#define F_FD 0xc8       /* stub: the memfd it made (-1: none) */
#define F_HANDLE 0xd0   /* stub: dlopen's result */
#define F_RESULT 0xd8   /* stub: the function's result */
#define F_ERROR 0xe0    /* stub: dlerror()'s text, when dlopen failed */
#define F_SIGNAL 0xe8   /* the signal the stub stops with */
#define F_STAGE 0xf0    /* stub: 1 memfd made, 2 done */
#define F_MEMFD_NAME 0x100  /* 64 bytes */
#define F_PATH 0x140        /* 64 bytes: /proc/self/fd/N, written by the tracer at stage 1 */
#define F_SYMBOL 0x180      /* 32 bytes */
#define F_TEXT 0x1a0        /* 256 bytes: a string argument (libcupti's path) */
#define F_FXSAVE 0x2c0      /* 512 bytes, 16-aligned: x87/SSE state */
#define FRAME_SIZE 0x4c0
#define FRAME_ALIGN 64
#define STUB_POP 512        /* `ret $STUB_POP`: the frame lies this far below the red zone */
#define STAGE_MEMFD 1
#define STAGE_DONE 2

/* the library's control block (struct gputime_control, attach.c): offsets */
#define C_MAGIC 0           /* 8 bytes: CONTROL_MAGIC */
#define C_HEARTBEAT 8       /* u64: cudaprobe adds 1 at least each HEARTBEAT_PERIOD */
#define C_STOP 16           /* u32: cudaprobe writes 1: stop recording */
#define C_STATE 20          /* u32: ATTACH_* */
#define C_FD 24             /* i32: the records' memfd in the process, while recording */
#define C_OWNER 28          /* u32: the pid of the cudaprobe that attached */
#define C_GENERATION 32     /* u32: attaches so far */
#define C_PAUSED 36         /* u32: 1: CUPTI's recording off, 0: on again (the watcher follows
                               it); written by the diagnosis and the cost benchmark only */
#define C_WHY 40            /* 256 bytes: why refused, or why it stopped */
#define C_APPLIED 296       /* u32: the watcher copies `paused` here once CUPTI's recording
                               follows it */
#define C_DETACHED 300      /* u32: DETACH_*: CUPTI taken out of the process after the stop */
#define CONTROL_SIZE 304
#define CONTROL_MAGIC "CPATTC2"
#define ATTACH_IDLE 0
#define ATTACH_RECORDING 1
#define ATTACH_REFUSED 2
#define ATTACH_STOPPING 3
#define ATTACH_STOPPED 4
/* gputime_inject_attach's `owner`: the attaching cudaprobe's pid, and above bit
 * 32 what it wants recorded */
#define ATTACH_WORK_ONLY 0x100000000  /* the GPU work only: no API record of any call */
#define ATTACH_CALL_TIES 0x200000000  /* the calls that queue work tied to it through CUPTI's
                                         callbacks on those functions alone (GPUTIME_API_CALLS) */
#define ATTACH_KEEP_CUPTI 0x400000000  /* CUPTI left in the process at the stop (no cuptiFinalize):
                                          benchmarks/cupti_cost.py's control, never cudaprobe */
/* C_DETACHED. Turned off, CUPTI still costs a process part of its price on each
 * CUDA call until it is finalized (cuptiFinalize), which CUPTI has done safely
 * only from the exit of a CUDA call, and safely with CUDA graphs only from
 * CUDA 12.6 (CUPTI API version 24) on: the stop asks for it, and the program's
 * next CUDA call does it, on its own thread, as it returns. */
#define DETACH_NONE 0        /* recording, or never recorded */
#define DETACH_ASKED 1       /* stopped: CUPTI goes at the exit of the program's next CUDA call */
#define DETACH_FINALIZING 2  /* one of its threads is in cuptiFinalize */
#define DETACH_DONE 3        /* CUPTI is out: the process runs as before the attach */
#define DETACH_KEPT 4        /* CUPTI stays in: older than CUDA 12.6, or ATTACH_KEEP_CUPTI */
#define DETACH_CUPTI_VERSION 24  /* cuptiGetVersion's of CUDA 12.6 */
/* gputime_record_to's `mode`: the API records of the calls that queue work
 * (CUPTI's RUNTIME and DRIVER kinds), none, or ties written from CUPTI's callbacks */
#define GPUTIME_MODE_CALLS 0
#define GPUTIME_MODE_WORK 1
#define GPUTIME_MODE_CALL_TIES 2
#define GPUTIME_MODE_KEEP_CUPTI 0x100  /* or'ed in: ATTACH_KEEP_CUPTI */
#define HEARTBEAT_TIMEOUT_MS 5000  /* no heartbeat this long: cudaprobe is gone, stop */
#define WATCH_PERIOD_MS 10
#define FLUSH_PERIOD_MS 500  /* CUPTI's buffers asked for this often (gputime_flush) */

#endif
