/* The records cupti/gputime.c writes, one file per process; the Python mirror
 * is cudaprobe/decode/gputime.py (tests/unit/test_gputime_layout.py compiles
 * this header and compares sizes and offsets with it). Little-endian, as the
 * machine writes them.
 *
 * A file is one gputime_header, then records. Each record is a gputime_record;
 * a NAME or STATUS record is followed by `size - sizeof(gputime_record)` bytes:
 * its text, NUL-padded to a multiple of 8. */
#ifndef CUDAPROBE_GPUTIME_H
#define CUDAPROBE_GPUTIME_H
#include <stdint.h>

#define GPUTIME_MAGIC "CPGPUT1"  /* 8 bytes with the NUL */
#define GPUTIME_VERSION 3

enum gputime_clock {
    GPUTIME_CLOCK_REALTIME = 0,   /* CUPTI's own (meant to follow CLOCK_REALTIME): add
                                     realtime_to_monotonic_ns */
    GPUTIME_CLOCK_MONOTONIC = 1,  /* ours, through cuptiActivityRegisterTimestampCallback */
};

enum gputime_api_records {  /* which calls CUPTI builds API records for */
    GPUTIME_API_UNKNOWN = 0,   /* not decided (CUPTI refused, or not loaded) */
    GPUTIME_API_SELECTED = 1,  /* launches, copies and memsets only (cuptiActivityEnable*Api) */
    GPUTIME_API_ALL = 2,       /* every call (the whole RUNTIME and DRIVER kinds: that libcupti
                                  lacks the fine-grained switches); the library keeps the same */
    GPUTIME_API_NONE = 3,      /* none: the GPU work only (an attach that joins nothing) */
    GPUTIME_API_CALLS = 4,     /* launches, copies and memsets, each written by the library
                                  from CUPTI's callbacks at the call (no API record kind on):
                                  an attach for serve --duty --py-stacks, switched with the
                                  slices */
};

enum gputime_type {
    GPUTIME_KERNEL = 1,   /* start/end on the GPU; device, context, stream; name_id */
    GPUTIME_MEMCPY = 2,   /* ... bytes, copy_kind (CUpti_ActivityMemcpyKind) */
    GPUTIME_MEMSET = 3,   /* ... bytes */
    GPUTIME_API = 4,      /* a launch/copy/memset API call: tid, cbid, domain, CPU start/end */
    GPUTIME_NAME = 5,     /* text: kernel name for name_id */
    GPUTIME_FUNCTION = 6, /* text: name of (domain, cbid), as CUPTI calls it */
    GPUTIME_STATUS = 7,   /* text: why there is no GPU time (cannot load CUPTI, ...) */
    GPUTIME_DROPPED = 8,  /* bytes: activity records CUPTI dropped (buffers full) */
};

struct gputime_header {
    char magic[8];
    uint32_t version;
    uint32_t pid;
    uint32_t clock;        /* enum gputime_clock */
    uint32_t record_size;  /* sizeof(struct gputime_record) */
    int64_t realtime_to_monotonic_ns;  /* CLOCK_MONOTONIC less CUPTI's clock when opened
                                          (cuptiGetTimestamp; else less CLOCK_REALTIME) */
    uint32_t system_tids;  /* 1: API records' tid is gettid()'s; 0: CUPTI's default,
                              pthread_self()'s low 32 bits, which no row has */
    uint32_t api_records;  /* enum gputime_api_records */
};

struct gputime_record {
    uint16_t type;         /* enum gputime_type */
    uint16_t size;         /* bytes, this struct and any text after it */
    uint32_t correlation;  /* CUPTI's correlation id: GPU record <-> API record */
    uint64_t start;        /* ns, the clock of the header */
    uint64_t end;
    uint64_t bytes;        /* memcpy, memset; DROPPED: the count */
    uint32_t device;
    uint32_t context;
    uint32_t stream;
    uint32_t tid;          /* API: the calling thread (gettid: header system_tids) */
    uint32_t cbid;         /* API, FUNCTION: CUPTI's callback id */
    uint32_t name_id;      /* KERNEL, NAME: the kernel's name */
    uint8_t domain;        /* API, FUNCTION: 4 driver, 5 runtime (CUPTI_ACTIVITY_KIND_*) */
    uint8_t copy_kind;     /* MEMCPY */
    uint8_t pad[6];
};

#endif
