// Cost of one durable log write, as the log's device does it (4 KiB, O_DIRECT | O_DSYNC, pwrite), three ways:
//   0  extending the file (each write makes it longer: the new length must be made durable too)
//   1  over zeros written before (what the log's zeroed space ahead of the tail gives, docs/log-format.md)
//   2  over fallocate'd space (unwritten extents: each write still converts an extent, a metadata update)
// Prints latency and CPU per write. Build and run (in a directory on the file system under test):
//   gcc -O2 -o /tmp/ovx benchmarks/disk/overwrite-vs-extend.c && for m in 0 1 2 0 1 2; do /tmp/ovx $m 5000; done
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: %s MODE(0|1|2) WRITES [FILE]\n", argv[0]); return 2; }
    int mode = atoi(argv[1]), n = atoi(argv[2]), size = 4096;
    const char *path = argc > 3 ? argv[3] : "ovx.data";
    unlink(path);
    if (mode == 1) {
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        char *zeros = calloc(1, 1 << 20);
        for (long i = 0; i < ((long)n * size >> 20) + 1; i++) if (write(fd, zeros, 1 << 20) != 1 << 20) { perror("write"); return 1; }
        fsync(fd); close(fd); free(zeros);
    }
    if (mode == 2) {
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        if (fallocate(fd, 0, 0, (long)n * size + (1 << 20)) != 0) { perror("fallocate"); return 1; }
        fsync(fd); close(fd);
    }
    int fd = open(path, O_CREAT | O_WRONLY | O_DIRECT | O_DSYNC, 0644);
    if (fd < 0) { perror("open (O_DIRECT)"); return 1; }
    void *buffer;
    if (posix_memalign(&buffer, 4096, size) != 0) return 1;
    memset(buffer, 7, size);
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    double start = now();
    for (int i = 0; i < n; i++) if (pwrite(fd, buffer, size, (long)i * size) != size) { perror("pwrite"); return 1; }
    double elapsed = now() - start;
    getrusage(RUSAGE_SELF, &after);
    double cpu = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) + (after.ru_stime.tv_sec - before.ru_stime.tv_sec)
               + ((after.ru_utime.tv_usec - before.ru_utime.tv_usec) + (after.ru_stime.tv_usec - before.ru_stime.tv_usec)) * 1e-6;
    const char *names[] = { "extending", "over zeros", "over fallocate" };
    printf("%-15s %7.1f us per write, %6.1f us CPU per write, %.1f context switches per write\n", names[mode],
           elapsed / n * 1e6, cpu / n * 1e6, (double)(after.ru_nvcsw - before.ru_nvcsw) / n);
    close(fd); unlink(path);
    return 0;
}
