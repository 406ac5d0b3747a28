/* Two kernel launches, then exit at once: the program whose
 * launches went unnamed, its maps gone before the tracer could read them.
 * One kernel's mangled name is over 1 KiB (a template over 24 long type
 * names), longer than any fixed buffer cudaprobe once copied names into.
 * Without a GPU both launches fail, but each passes its kernel's host stub.
 * Prints one JSON line per launch: the event and the stub address. */
#include <cuda_runtime.h>
#include <stdio.h>

#define LONG_TYPE(n) struct a_type_whose_name_is_long_enough_to_matter_##n {};
#define T(n) a_type_whose_name_is_long_enough_to_matter_##n
LONG_TYPE(01) LONG_TYPE(02) LONG_TYPE(03) LONG_TYPE(04) LONG_TYPE(05) LONG_TYPE(06)
LONG_TYPE(07) LONG_TYPE(08) LONG_TYPE(09) LONG_TYPE(10) LONG_TYPE(11) LONG_TYPE(12)
LONG_TYPE(13) LONG_TYPE(14) LONG_TYPE(15) LONG_TYPE(16) LONG_TYPE(17) LONG_TYPE(18)
LONG_TYPE(19) LONG_TYPE(20) LONG_TYPE(21) LONG_TYPE(22) LONG_TYPE(23) LONG_TYPE(24)

template <typename... Ts> __global__ void long_named(int *x)
{
	if (x)
		x[threadIdx.x] = sizeof...(Ts);
}

__global__ void short_named(int *x)
{
	if (x)
		x[threadIdx.x] = 1;
}

static void said(const void *stub)
{
	printf("{\"event\":\"cudaLaunchKernel\",\"func\":\"%#lx\"}\n", (unsigned long)stub);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	long_named<T(01), T(02), T(03), T(04), T(05), T(06), T(07), T(08), T(09), T(10), T(11),
		   T(12), T(13), T(14), T(15), T(16), T(17), T(18), T(19), T(20), T(21), T(22),
		   T(23), T(24)><<<1, 32>>>(NULL);
	said((const void *)long_named<T(01), T(02), T(03), T(04), T(05), T(06), T(07), T(08),
				      T(09), T(10), T(11), T(12), T(13), T(14), T(15), T(16),
				      T(17), T(18), T(19), T(20), T(21), T(22), T(23), T(24)>);
	short_named<<<2, 64>>>(NULL);
	said((const void *)short_named);
	return 0;
}
