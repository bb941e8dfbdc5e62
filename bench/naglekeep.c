/*
 * naglekeep: an LD_PRELOAD shim that makes a server leave Nagle's algorithm
 * on, as Courier-IMAP does by nature, for the benchmark's "server that
 * leaves Nagle on" (issue 16).
 *
 * Its setsockopt() ignores IPPROTO_TCP TCP_NODELAY and TCP_CORK: it returns
 * 0 without applying them; every other option goes to the real
 * setsockopt().  Dovecot's output streams cork a socket while they fill it
 * and, on uncork, set TCP_NODELAY on and off again to push the pending
 * data out at once; with both ignored, every write of the server goes
 * through Nagle's algorithm (a small segment waits while earlier data is
 * unacknowledged), which is the behaviour of a server that sets neither.
 *
 * Dovecot clears its children's environment: start the master with
 * LD_PRELOAD=<this .so> and list LD_PRELOAD in import_environment
 * (imapmig.testing.dovecot.DovecotInstance(preload=...) does both).
 *
 * Build: gcc -O2 -Wall -shared -fPIC -o naglekeep.so naglekeep.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <sys/socket.h>

typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);

int setsockopt(int fd, int level, int name, const void *value, socklen_t length)
{
    static setsockopt_fn real;

    if (level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK))
        return 0;
    if (real == NULL)
        real = (setsockopt_fn)dlsym(RTLD_NEXT, "setsockopt");
    return real(fd, level, name, value, length);
}
