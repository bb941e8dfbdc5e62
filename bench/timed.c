/*
 * timed: run a command and report what the benchmark measures of it.
 *
 *   timed REPORT-FILE COMMAND [ARGUMENT...]
 *
 * Forks, execs COMMAND, waits for it with wait4 and writes one JSON object
 * to REPORT-FILE: {"seconds": wall-clock time from fork to exit,
 * "maxrss_kib": ru_maxrss, "user": ..., "system": ..., "status": exit
 * status or -signal}.  Its own exit status is 0 when the report is written.
 *
 * Why a separate process: a child forked from the benchmark's Python
 * process starts with that process's resident pages, and ru_maxrss keeps
 * that high-water mark across exec; forked from this small program, the
 * figure is the client's own.
 *
 * Build: gcc -O2 -Wall -o timed timed.c
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fputs("usage: timed REPORT-FILE COMMAND [ARGUMENT...]\n", stderr);
        return 2;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t pid = fork();
    if (pid < 0) {
        perror("timed: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "timed: cannot run %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage usage;
    while (wait4(pid, &status, 0, &usage) < 0) {
        if (errno != EINTR) {
            perror("timed: wait4");
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    FILE *report = fopen(argv[1], "w");
    if (!report) {
        perror("timed: report");
        return 2;
    }
    fprintf(report,
            "{\"seconds\": %.6f, \"maxrss_kib\": %ld, \"user\": %.6f, \"system\": %.6f, "
            "\"status\": %d}\n",
            seconds, usage.ru_maxrss, usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
            usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6, code);
    return fclose(report) == 0 ? 0 : 2;
}
