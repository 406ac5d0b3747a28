/* What another user puts where cudaprobe once looked for its --gpu-time
 * library (tests/integration/test_hostile_caches.py): a library that, once
 * loaded, leaves a mark (the file $PLANTED_MARKER) and its uid in it.
 * Built with -shared -fPIC. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void planted(void)
{
    const char *marker = getenv("PLANTED_MARKER");
    int fd = marker ? open(marker, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (fd >= 0) {
        dprintf(fd, "loaded as uid %d\n", (int)getuid());
        close(fd);
    }
}
