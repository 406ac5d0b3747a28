/* Forks without exec whose children call CUDA at once: the first thing each
 * child does after fork() returns is a cudaMalloc.
 * Usage: fork_calls CHILDREN CALLS [seq]
 *   The parent makes one cudaMalloc (size 1), then forks CHILDREN children,
 *   every other one from a second thread of its own (with "seq": one at a
 *   time, each waited for before the next is forked). Child C makes CALLS
 *   cudaMalloc calls of size 1000*C+i (i from 1) at once, then forks one
 *   grandchild, which makes CALLS calls of size 1000*C+500+i at once; each
 *   exits with status C (a grandchild 100+C) after its calls. Every wait
 *   asks for stops too (WUNTRACED), and SIGCHLD is counted by its code: a
 *   stop of a child, or a status other than its own, fails the parent,
 *   which exits 0 if all were as expected (3: a status, 4: a stop seen by
 *   wait, 5: a SIGCHLD other than an exit).
 * Each process prints a JSON line on stderr: {"pid":..,"size":..,"calls":..},
 * size being its first call's. With FORK_CALLS_GATE=FIFO in the environment,
 * each child opens that FIFO after its calls and reads a byte from it before
 * it forks its grandchild (a test attaches a debugger to it meanwhile).
 * With FORK_CALLS_START=FIFO, the parent reads a byte from that FIFO after
 * its first call, before it forks (a test attaches with --pid meanwhile).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static int n;
static volatile sig_atomic_t not_exits;  /* SIGCHLDs for a stop, a trap or a continue */

static void on_child(int sig, siginfo_t *info, void *ctx)
{
	(void)sig;
	(void)ctx;
	if (info->si_code != CLD_EXITED && info->si_code != CLD_KILLED && info->si_code != CLD_DUMPED)
		not_exits++;
}

/* 0: exited with `want`; 3: another status; 4: a stop */
static int reap(pid_t pid, int want)
{
	int status = 0;
	pid_t got;
	while ((got = waitpid(pid, &status, WUNTRACED)) < 0 && errno == EINTR)
		;
	if (got != pid)
		return 3;
	if (WIFSTOPPED(status))
		return 4;
	return WIFEXITED(status) && WEXITSTATUS(status) == want ? 0 : 3;
}

static void calls(long first)
{
	for (int i = 0; i < n; i++) {
		void *p = NULL;
		cudaMalloc(&p, (size_t)(first + i));
	}
	fprintf(stderr, "{\"pid\":%d,\"size\":%ld,\"calls\":%d}\n", (int)getpid(), first, n);
}

/* the child's whole life: its calls, a grandchild's, their statuses */
/* a byte read from the FIFO the environment's `name` gives, if it gives one */
static int wait_at(const char *name)
{
	const char *path = getenv(name);
	if (!path)
		return 0;
	char byte;
	int fd = open(path, O_RDONLY);
	int ok = fd >= 0 && read(fd, &byte, 1) == 1;
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

static void child(int c)
{
	calls(1000L * c + 1);
	if (wait_at("FORK_CALLS_GATE"))
		_exit(91);
	pid_t g = fork();
	if (g == 0) {
		calls(1000L * c + 501);
		_exit((100 + c) % 256);
	}
	if (g < 0 || reap(g, (100 + c) % 256))
		_exit(90);
	_exit(c % 256);
}

static pid_t spawn(int c)
{
	pid_t pid = fork();
	if (pid == 0)
		child(c);
	return pid;
}

static void *from_thread(void *arg)
{
	return (void *)(long)spawn((int)(long)arg);
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: fork_calls CHILDREN CALLS [seq]\n");
		return 64;
	}
	int seq = argc == 4 && !strcmp(argv[3], "seq");
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_child;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	int children = atoi(argv[1]);
	n = atoi(argv[2]);
	if (children < 1 || children > 1000)
		return 64;
	pid_t pids[1000];
	int failed = 0, one = n;
	n = 1;
	calls(1);
	n = one;
	if (wait_at("FORK_CALLS_START"))
		return 71;
	for (int c = 1; c <= children; c++) {
		if (c % 2 == 0) {
			pthread_t t;
			void *ret = NULL;
			if (pthread_create(&t, NULL, from_thread, (void *)(long)c) || pthread_join(t, &ret))
				return 70;
			pids[c - 1] = (pid_t)(long)ret;
		} else {
			pids[c - 1] = spawn(c);
		}
		if (seq) {
			int r = pids[c - 1] < 0 ? 3 : reap(pids[c - 1], c % 256);
			failed = failed ? failed : r;
		}
	}
	for (int c = 1; c <= children && !seq; c++) {
		int r = pids[c - 1] < 0 ? 3 : reap(pids[c - 1], c % 256);
		failed = failed ? failed : r;
	}
	return failed ? failed : not_exits ? 5 : 0;
}
