/* The code cudaprobe has a thread of a running process execute to load the
 * GPU-time library, or to call one of its functions. cudaprobe copies these
 * bytes (from gputime_stub to its end, position-independent) into unused
 * space at the end of the C library's executable segment, writes a frame
 * (inject.h) on the thread's stack, and points rsp at the frame and rip here.
 * Every register is restored from the frame at the end; the stub keeps no
 * state of its own, so the same bytes serve every injection.
 *
 * The two stops are tgkill(self, F_SIGNAL): a signal the process neither
 * catches nor blocks, whose default is to ignore it. With cudaprobe there,
 * each is a signal-delivery stop where cudaprobe reads or writes the frame;
 * with cudaprobe gone (kill -9), the signal is ignored, F_GO is not 1, and
 * the stub restores the thread without loading anything. */
#include "inject.h"

    .text
    .globl gputime_stub
    .type gputime_stub, @function
    .p2align 4
gputime_stub:
    fxsave64 F_FXSAVE(%rsp)
    movq %rsp, %rbx                 /* the frame; rbx is kept across calls */
    movq $-1, F_FD(%rbx)
    cmpq $0, F_FN(%rbx)
    jne .Lcall
    leaq F_MEMFD_NAME(%rbx), %rdi
    movl $3, %esi                   /* MFD_CLOEXEC | MFD_ALLOW_SEALING */
    movl $319, %eax                 /* memfd_create */
    syscall
    movq %rax, F_FD(%rbx)
    movq $STAGE_MEMFD, F_STAGE(%rbx)
    call .Lstop                     /* cudaprobe fills the memfd and sets F_GO */
    cmpq $1, F_GO(%rbx)
    jne .Lclose
    leaq F_PATH(%rbx), %rdi
    movl $2, %esi                   /* RTLD_NOW */
    call *F_DLOPEN(%rbx)
    movq %rax, F_HANDLE(%rbx)
    testq %rax, %rax
    jnz .Lsym
    cmpq $0, F_DLERROR(%rbx)
    je .Lclose
    call *F_DLERROR(%rbx)
    movq %rax, F_ERROR(%rbx)
    jmp .Lclose
.Lsym:
    movq %rax, %rdi
    leaq F_SYMBOL(%rbx), %rsi
    call *F_DLSYM(%rbx)
    testq %rax, %rax
    jz .Lclose
    movq %rax, F_FN(%rbx)
.Lcall:
    movq F_ARG0(%rbx), %rdi
    movq F_ARG1(%rbx), %rsi
    movq F_ARG2(%rbx), %rdx
    call *F_FN(%rbx)
    movq %rax, F_RESULT(%rbx)
.Lclose:
    movq F_FD(%rbx), %rdi
    testq %rdi, %rdi
    js .Ldone
    movl $3, %eax                   /* close: the library stays mapped */
    syscall
.Ldone:
    movq $STAGE_DONE, F_STAGE(%rbx)
    call .Lstop                     /* cudaprobe reads the results */
    movq %rbx, %rsp
    fxrstor64 F_FXSAVE(%rsp)
    pushq R_RFLAGS(%rsp)
    popfq
    movq R_RAX(%rsp), %rax
    movq R_RBX(%rsp), %rbx
    movq R_RCX(%rsp), %rcx
    movq R_RDX(%rsp), %rdx
    movq R_RSI(%rsp), %rsi
    movq R_RDI(%rsp), %rdi
    movq R_RBP(%rsp), %rbp
    movq R_R8(%rsp), %r8
    movq R_R9(%rsp), %r9
    movq R_R10(%rsp), %r10
    movq R_R11(%rsp), %r11
    movq R_R12(%rsp), %r12
    movq R_R13(%rsp), %r13
    movq R_R14(%rsp), %r14
    movq R_R15(%rsp), %r15
    movq F_RETURN(%rsp), %rsp       /* the slot holding the original rip */
    ret $STUB_POP                   /* rip back, rsp back to where it was */
.Lstop:                             /* tgkill(getpid(), gettid(), F_SIGNAL) */
    movl $39, %eax
    syscall
    movq %rax, %r12
    movl $186, %eax
    syscall
    movq %rax, %rsi
    movq %r12, %rdi
    movq F_SIGNAL(%rbx), %rdx
    movl $234, %eax
    syscall
    ret
    .size gputime_stub, .-gputime_stub
    .section .note.GNU-stack,"",@progbits
