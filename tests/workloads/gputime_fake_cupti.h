/* CUPTI's record iterator, faked, for running cupti/gputime.c's writer without
 * a GPU (tests/workloads/gputime_writer.c, benchmarks/gputime_writer_bench.c):
 * include it after "gputime.c", fill fake_records[0..fake_count), set
 * fake_next_record = 0 before each buffer_completed(). */
#define FAKE_MAX 4096
static CUpti_Activity *fake_records[FAKE_MAX];
static int fake_count, fake_next_record;

static CUptiResult CUPTIAPI fake_next(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
    (void)buffer, (void)valid;
    if (fake_next_record >= fake_count)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = fake_records[fake_next_record++];
    return CUPTI_SUCCESS;
}

/* the library as InitializeInjection leaves it, but with the fakes and `dir` */
static void fake_initialized(const char *dir)
{
    snprintf(out_dir, sizeof out_dir, "%s", dir);
    cupti.next_record = fake_next;
    clock_kind = GPUTIME_CLOCK_MONOTONIC;
    system_tids = 1;
}
