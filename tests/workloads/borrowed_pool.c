/* A library that Python loads with ctypes, whose CUDA calls are made by
 * threads that run no Python, while Python threads wait (or do not) in C
 * calls: the workloads of the borrowed-stack tests (--py-stacks).
 *
 *   worker_calls(n)        a thread made for the call makes n calls of
 *                          cudaDriverGetVersion; the caller joins it (a C++
 *                          pool that a ctypes call hands work to)
 *   worker_allocs(f, n, s) the same, n calls of f (a cudaMalloc: the test's
 *                          library, passed by Python) of s bytes, never freed
 *   pool_start()           a device thread, as PyTorch's autograd makes: it
 *                          has a Python thread state but no frame, has
 *                          released the GIL, and waits for work
 *   pool_backward(n)       hands the device thread n calls and waits until
 *                          they are done (backward())
 *   pool_stop()
 *   native_start(w, n)     a thread, made by a native thread that exits,
 *                          that waits (polling, never asleep: nothing wakes
 *                          it) until Python sets `native_go` and w threads
 *                          sleep in wait_in_c(), then makes n calls and
 *                          sets `native_done`
 *   wait_in_c()            blocks until the native thread is done
 *   native_join()
 *
 * Each returns the tid of the thread that made the calls (the device
 * thread's, the worker's). Deterministic: work is handed over only once the
 * thread that takes it sleeps in its wait (its /proc state is S), so the
 * hand-over wakes it; the native thread starts its calls only once every
 * waiter sleeps in its wait. The calls fail without a GPU; they are made.
 * Python's C API is used by the device thread alone, resolved in the
 * process that loads the library (python exports it). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int PyGILState_Ensure(void);          /* PyGILState_STATE: an enum */
void PyGILState_Release(int state);
void *PyEval_SaveThread(void);        /* PyThreadState * */
void PyEval_RestoreThread(void *tstate);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static int gettid_(void)
{
	return (int)syscall(SYS_gettid);
}

static void calls(int n)
{
	int v;
	for (int i = 0; i < n; i++)
		cudaDriverGetVersion(&v);
}

static void nap(void)
{
	struct timespec ts = {0, 1000000};
	nanosleep(&ts, NULL);
}

/* Whether thread tid of this process sleeps (state S in /proc) */
static int asleep(int tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *end = strrchr(buf, ')');  /* the name may hold spaces and parens */
	return end && end[1] == ' ' && end[2] == 'S';
}

/* ---- a thread made for the call, joined ---- */

struct job {
	int n;
	int tid;
};

static void *worker_main(void *arg)
{
	struct job *j = arg;
	j->tid = gettid_();
	calls(j->n);
	return NULL;
}

int worker_calls(int n)
{
	struct job j = {.n = n};
	pthread_t t;
	if (pthread_create(&t, NULL, worker_main, &j))
		return -1;
	pthread_join(t, NULL);
	return j.tid;
}

struct alloc_job {
	int (*alloc)(void **, size_t);
	int n;
	size_t size;
	int tid;
};

static void *allocator_main(void *arg)
{
	struct alloc_job *j = arg;
	j->tid = gettid_();
	for (int i = 0; i < j->n; i++) {
		void *p;
		j->alloc(&p, j->size);
	}
	return NULL;
}

int worker_allocs(int (*alloc)(void **, size_t), int n, size_t size)
{
	struct alloc_job j = {.alloc = alloc, .n = n, .size = size};
	pthread_t t;
	if (pthread_create(&t, NULL, allocator_main, &j))
		return -1;
	pthread_join(t, NULL);
	return j.tid;
}

/* ---- the device thread ---- */

static pthread_t device;
static int device_tid, device_ready, device_idle, work, stopping;

static void *device_main(void *arg)
{
	(void)arg;
	int gil = PyGILState_Ensure();       /* a thread state of its own... */
	void *tstate = PyEval_SaveThread();  /* ...kept, with no frame, GIL released */
	pthread_mutex_lock(&mu);
	device_tid = gettid_();
	device_ready = 1;
	pthread_cond_broadcast(&cv);
	for (;;) {
		device_idle = 1;
		while (!work && !stopping)
			pthread_cond_wait(&cv, &mu);
		device_idle = 0;
		if (stopping)
			break;
		int n = work;
		pthread_mutex_unlock(&mu);
		calls(n);
		pthread_mutex_lock(&mu);
		work = 0;
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
	PyEval_RestoreThread(tstate);
	PyGILState_Release(gil);
	return NULL;
}

int pool_start(void)
{
	if (pthread_create(&device, NULL, device_main, NULL))
		return -1;
	pthread_mutex_lock(&mu);
	while (!device_ready)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return device_tid;
}

/* Hands n calls over once the device thread sleeps in its wait */
static void hand_over(int n, int stop)
{
	for (;;) {
		pthread_mutex_lock(&mu);
		if (device_idle && asleep(device_tid))
			break;
		pthread_mutex_unlock(&mu);
		nap();
	}
	work = n;
	stopping = stop;
	pthread_cond_broadcast(&cv);
}

int pool_backward(int n)
{
	hand_over(n, 0);  /* returns holding mu */
	while (work)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return device_tid;
}

void pool_stop(void)
{
	hand_over(0, 1);
	pthread_mutex_unlock(&mu);
	pthread_join(device, NULL);
}

/* ---- a native thread, and Python threads that wait or do not ----
 * The native thread is made by a native thread (no Python thread hands it
 * anything), and shares no lock with the Python threads while they wait:
 * they take none of its wakeups. */

#define MAX_WAITERS 8
static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static pthread_t native;
static int native_tid, native_waiters, native_n, waiting, waiter_tids[MAX_WAITERS];
int native_go;    /* set by Python (no C call: it keeps the GIL) */
int native_done;  /* read by the Python thread that spins instead of waiting */

static int load(int *at)
{
	return __atomic_load_n(at, __ATOMIC_SEQ_CST);
}

static void *native_main(void *arg)
{
	(void)arg;
	__atomic_store_n(&native_tid, gettid_(), __ATOMIC_SEQ_CST);
	/* polls without sleeping: nothing wakes it (a timer's interrupt taken
	 * while a Python thread is in a system call is counted as that thread's) */
	for (int all = 0; !all; ) {
		sched_yield();
		int n = load(&waiting);
		all = load(&native_go) && n == native_waiters;
		for (int i = 0; all && i < n; i++)
			all = asleep(load(&waiter_tids[i]));
	}
	calls(native_n);
	pthread_mutex_lock(&done_mu);
	__atomic_store_n(&native_done, 1, __ATOMIC_SEQ_CST);
	pthread_cond_broadcast(&done_cv);
	pthread_mutex_unlock(&done_mu);
	return NULL;
}

static void *starter_main(void *arg)
{
	(void)arg;
	pthread_create(&native, NULL, native_main, NULL);
	return NULL;
}

int native_start(int waiters, int n)
{
	native_tid = waiting = native_go = native_done = 0;  /* each run from the start */
	for (int i = 0; i < MAX_WAITERS; i++)
		waiter_tids[i] = 0;
	native_waiters = waiters < MAX_WAITERS ? waiters : MAX_WAITERS;
	native_n = n;
	pthread_t starter;
	if (pthread_create(&starter, NULL, starter_main, NULL))
		return -1;
	pthread_join(starter, NULL);
	while (!load(&native_tid))  /* its tid, for the caller to print */
		nap();
	return native_tid;
}

int wait_in_c(void)
{
	int i = __atomic_fetch_add(&waiting, 1, __ATOMIC_SEQ_CST);
	if (i < MAX_WAITERS)
		__atomic_store_n(&waiter_tids[i], gettid_(), __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&done_mu);
	while (!load(&native_done))
		pthread_cond_wait(&done_cv, &done_mu);
	pthread_mutex_unlock(&done_mu);
	return native_tid;
}

int native_join(void)
{
	pthread_join(native, NULL);
	return native_tid;
}
