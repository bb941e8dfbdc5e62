/*
 * delayline: a user-space network emulator between two network namespaces.
 *
 * This machine's kernel has no sch_netem, so delay cannot come from tc.  A
 * delaying TCP proxy would terminate TCP and hide exactly what the
 * benchmark measures (Nagle, delayed ACKs, window growth), so instead this
 * program creates one TUN device (IFF_TUN | IFF_NO_PI, IP packets without
 * any header) inside each of two named network namespaces and relays raw IP
 * packets between them: TCP stays end to end, between the two kernels.
 *
 *   delayline [options] SERVER_NS CLIENT_NS
 *
 * SERVER_NS and CLIENT_NS are names from `ip netns add` (the files
 * /var/run/netns/NAME); a value containing '/' is taken as the path of a
 * namespace file instead (e.g. /proc/PID/ns/net).  The program setns()es
 * into each namespace in turn, opens /dev/net/tun there, creates the device,
 * sets its MTU and brings it up, and returns to its original namespace.
 * Addresses and routes are left to the caller (bench/netns.py uses `ip`).
 * The devices are not persistent: they vanish when this program exits.
 *
 * Options:
 *   --delay-us N      one-way delay in microseconds, each direction (0)
 *   --rate-bps N      bandwidth per direction in bits per second, counting
 *                     IP packet bytes; 0 means unlimited (0)
 *   --burst-bytes N   token bucket depth (the larger of the MTU and 1 ms of
 *                     the rate)
 *   --queue-bytes N   drop-tail limit of the bytes waiting for tokens; a
 *                     packet arriving when more are waiting is dropped, as a
 *                     router with a full buffer would (1 MiB)
 *   --mtu N           MTU of both devices (65000)
 *   --ifname NAME     name of the device in each namespace (dl0)
 *   --buffer-bytes N  packet memory per direction, for packets on the wire
 *                     and waiting; a packet that does not fit is dropped
 *                     (32 MiB)
 *   --stats           print packet counters on standard error at exit
 *
 * Model, per direction: a packet read from one device first passes a token
 * bucket (it departs once the bucket holds its size in bytes; packets wait in
 * order), then travels for the one-way delay, then is written to the other
 * device.  Departure times are computed on arrival, so each direction is one
 * FIFO of (packet, due time) in a ring buffer; the loop waits with ppoll()
 * (nanosecond timeout, CLOCK_MONOTONIC) until a device is readable or the
 * oldest packet is due.  Nothing is printed per packet.
 *
 * When both devices exist it writes "ready\n" on standard output.  SIGTERM,
 * SIGINT and SIGHUP make it exit 0 (packets still in flight are discarded);
 * it also receives SIGTERM when its parent dies (PR_SET_PDEATHSIG), so a
 * crashed benchmark does not leave it running.
 *
 * Build: gcc -O2 -Wall -Wextra -o delayline delayline.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The largest read from a TUN device; an IPv4 packet is at most 65535. */
#define MAX_PACKET 65536
/* Packet offsets in the ring are aligned to this. */
#define ALIGN 64
/* Packets read from one device before the loop looks at the other. */
#define READ_BUDGET 64

struct config {
    int64_t delayNs;
    uint64_t rateBitsPerSecond;
    double burstBytes;
    double queueBytes;
    int mtu;
    const char *ifname;
    size_t bufferBytes;
    int stats;
};

struct packet {
    size_t offset;
    size_t length;
    int64_t due;
};

struct direction {
    const char *name;
    int in;
    int out;
    unsigned char *data;
    size_t dataSize;
    size_t writePos;
    struct packet *packets;
    size_t slots;
    size_t head;
    size_t count;
    int64_t lastDeparture;
    double tokens;
    uint64_t forwarded;
    uint64_t forwardedBytes;
    uint64_t droppedQueue;
    uint64_t droppedBuffer;
    uint64_t writeErrors;
};

static volatile sig_atomic_t stopRequested;

static void onSignal(int signum)
{
    (void)signum;
    stopRequested = 1;
}

static void die(const char *what)
{
    fprintf(stderr, "delayline: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int64_t monotonicNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static unsigned long long parseNumber(const char *option, const char *text)
{
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
        fprintf(stderr, "delayline: %s: not a non-negative integer: %s\n", option, text);
        exit(2);
    }
    return value;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: delayline [--delay-us N] [--rate-bps N] [--burst-bytes N]\n"
            "                 [--queue-bytes N] [--mtu N] [--ifname NAME]\n"
            "                 [--buffer-bytes N] [--stats] SERVER_NS CLIENT_NS\n");
    exit(2);
}

/*
 * Create the TUN device inside namespace `ns` and return its (non-blocking)
 * descriptor; the caller's namespace is restored before returning.
 */
static int openTun(const char *ns, const struct config *config, int originalNs)
{
    char path[PATH_MAX];
    if (strchr(ns, '/') != NULL)
        snprintf(path, sizeof path, "%s", ns);
    else
        snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int nsFd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsFd < 0) {
        fprintf(stderr, "delayline: open %s: %s\n", path, strerror(errno));
        exit(1);
    }
    if (setns(nsFd, CLONE_NEWNET) < 0)
        die("setns");
    close(nsFd);

    /* The device belongs to the namespace current when /dev/net/tun is opened. */
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        die("open /dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    memcpy(ifr.ifr_name, config->ifname, strlen(config->ifname));
    if (ioctl(fd, TUNSETIFF, &ifr) < 0)
        die("TUNSETIFF");

    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        die("socket");
    ifr.ifr_mtu = config->mtu;
    if (ioctl(sock, SIOCSIFMTU, &ifr) < 0)
        die("SIOCSIFMTU");
    if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
        die("SIOCGIFFLAGS");
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0)
        die("SIOCSIFFLAGS");
    close(sock);

    if (setns(originalNs, CLONE_NEWNET) < 0)
        die("setns back");
    return fd;
}

static void initDirection(struct direction *d, const char *name, int in, int out,
                          const struct config *config, int64_t now)
{
    memset(d, 0, sizeof *d);
    d->name = name;
    d->in = in;
    d->out = out;
    d->dataSize = config->bufferBytes;
    d->data = malloc(d->dataSize);
    /* Small packets (ACKs) use one ALIGN unit each. */
    d->slots = d->dataSize / ALIGN + 1;
    d->packets = malloc(d->slots * sizeof *d->packets);
    if (d->data == NULL || d->packets == NULL)
        die("malloc");
    d->lastDeparture = now;
    d->tokens = config->burstBytes;
}

/*
 * Where the next packet may be read to (MAX_PACKET contiguous bytes), or
 * NULL when the ring is full.  The live region is [head offset, writePos),
 * or, wrapped, [head offset, end) + [0, writePos); writePos never reaches
 * the head offset while packets are queued.
 */
static unsigned char *reserve(struct direction *d)
{
    if (d->count == d->slots)
        return NULL;
    if (d->count == 0) {
        d->writePos = 0;
        return d->data;
    }
    size_t head = d->packets[d->head].offset;
    if (d->writePos > head) {
        if (d->dataSize - d->writePos >= MAX_PACKET)
            return d->data + d->writePos;
        if (head > MAX_PACKET) {
            d->writePos = 0;
            return d->data;
        }
        return NULL;
    }
    if (head - d->writePos > MAX_PACKET)
        return d->data + d->writePos;
    return NULL;
}

/*
 * Pass a packet of `length` bytes arriving at `now` through the token
 * bucket; return its due time at the far side, or -1 to drop it.
 */
static int64_t admit(struct direction *d, const struct config *config, int64_t now, size_t length)
{
    if (config->rateBitsPerSecond == 0)
        return now + config->delayNs;
    double bytesPerNs = (double)config->rateBitsPerSecond / 8e9;
    int64_t start = now;
    double backlog = 0;
    if (d->lastDeparture > now) {
        start = d->lastDeparture;
        backlog = (double)(d->lastDeparture - now) * bytesPerNs;
    }
    if (backlog + (double)length > config->queueBytes)
        return -1;
    double tokens = d->tokens + (double)(start - d->lastDeparture) * bytesPerNs;
    if (tokens > config->burstBytes)
        tokens = config->burstBytes;
    int64_t departure = start;
    if (tokens >= (double)length) {
        d->tokens = tokens - (double)length;
    } else {
        departure = start + (int64_t)(((double)length - tokens) / bytesPerNs) + 1;
        d->tokens = 0;
    }
    d->lastDeparture = departure;
    return departure + config->delayNs;
}

/* Read what the input device has (up to READ_BUDGET packets) into the FIFO. */
static void receive(struct direction *d, const struct config *config)
{
    static unsigned char scratch[MAX_PACKET];
    for (int i = 0; i < READ_BUDGET; i++) {
        unsigned char *to = reserve(d);
        ssize_t n = read(d->in, to != NULL ? to : scratch, MAX_PACKET);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            die("read");
        }
        if (n == 0)
            return;
        if (to == NULL) {
            d->droppedBuffer++;
            continue;
        }
        int64_t due = admit(d, config, monotonicNs(), (size_t)n);
        if (due < 0) {
            d->droppedQueue++;
            continue;
        }
        size_t tail = (d->head + d->count) % d->slots;
        d->packets[tail].offset = d->writePos;
        d->packets[tail].length = (size_t)n;
        d->packets[tail].due = due;
        d->count++;
        d->writePos += ((size_t)n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    }
}

/* Write every packet due by `now` to the output device, in order. */
static void deliver(struct direction *d, int64_t now)
{
    while (d->count > 0) {
        struct packet *p = &d->packets[d->head];
        if (p->due > now)
            return;
        if (write(d->out, d->data + p->offset, p->length) < 0) {
            if (errno == EINTR)
                continue;
            /* The receiving stack refused it: the packet is lost, as on a wire. */
            d->writeErrors++;
        } else {
            d->forwarded++;
            d->forwardedBytes += p->length;
        }
        d->head = (d->head + 1) % d->slots;
        d->count--;
    }
}

static void printStats(const struct direction *d)
{
    fprintf(stderr,
            "delayline: %s: forwarded %llu packets %llu bytes, dropped %llu (queue) "
            "%llu (buffer), write errors %llu\n",
            d->name, (unsigned long long)d->forwarded, (unsigned long long)d->forwardedBytes,
            (unsigned long long)d->droppedQueue, (unsigned long long)d->droppedBuffer,
            (unsigned long long)d->writeErrors);
}

int main(int argc, char **argv)
{
    struct config config = {
        .delayNs = 0,
        .rateBitsPerSecond = 0,
        .burstBytes = 0,
        .queueBytes = 1 << 20,
        .mtu = 65000,
        .ifname = "dl0",
        .bufferBytes = 32 << 20,
        .stats = 0,
    };
    static const struct option options[] = {
        {"delay-us", required_argument, NULL, 'd'},
        {"rate-bps", required_argument, NULL, 'r'},
        {"burst-bytes", required_argument, NULL, 'b'},
        {"queue-bytes", required_argument, NULL, 'q'},
        {"mtu", required_argument, NULL, 'm'},
        {"ifname", required_argument, NULL, 'i'},
        {"buffer-bytes", required_argument, NULL, 'B'},
        {"stats", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int option;
    while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (option) {
        case 'd':
            config.delayNs = (int64_t)parseNumber("--delay-us", optarg) * 1000;
            break;
        case 'r':
            config.rateBitsPerSecond = parseNumber("--rate-bps", optarg);
            break;
        case 'b':
            config.burstBytes = (double)parseNumber("--burst-bytes", optarg);
            break;
        case 'q':
            config.queueBytes = (double)parseNumber("--queue-bytes", optarg);
            break;
        case 'm':
            config.mtu = (int)parseNumber("--mtu", optarg);
            break;
        case 'i':
            config.ifname = optarg;
            break;
        case 'B':
            config.bufferBytes = (size_t)parseNumber("--buffer-bytes", optarg);
            break;
        case 's':
            config.stats = 1;
            break;
        default:
            usage();
        }
    }
    if (argc - optind != 2)
        usage();
    if (config.mtu < 68 || config.mtu > 65535) {
        fprintf(stderr, "delayline: --mtu must be between 68 and 65535\n");
        return 2;
    }
    if (strlen(config.ifname) == 0 || strlen(config.ifname) >= IFNAMSIZ) {
        fprintf(stderr, "delayline: --ifname must be 1 to %d characters\n", IFNAMSIZ - 1);
        return 2;
    }
    if (config.bufferBytes < 4 * MAX_PACKET) {
        fprintf(stderr, "delayline: --buffer-bytes must be at least %d\n", 4 * MAX_PACKET);
        return 2;
    }
    if (config.burstBytes == 0 && (double)config.rateBitsPerSecond / 8000.0 > (double)config.mtu)
        config.burstBytes = (double)config.rateBitsPerSecond / 8000.0;
    /* A packet larger than the bucket would never leave. */
    if (config.burstBytes < (double)config.mtu)
        config.burstBytes = (double)config.mtu;

    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
        die("PR_SET_PDEATHSIG");
    if (getppid() == 1)
        return 0;
    /* Wake up on time: the default 50 us slack would blur short delays. */
    prctl(PR_SET_TIMERSLACK, 1UL);

    sigset_t blocked, waitMask;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGHUP);
    /* Signals are only delivered inside ppoll(), so none is lost or races. */
    if (sigprocmask(SIG_BLOCK, &blocked, &waitMask) < 0)
        die("sigprocmask");
    sigdelset(&waitMask, SIGTERM);
    sigdelset(&waitMask, SIGINT);
    sigdelset(&waitMask, SIGHUP);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGHUP, &action, NULL);
    signal(SIGPIPE, SIG_IGN);

    int originalNs = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (originalNs < 0)
        die("open /proc/self/ns/net");
    int serverFd = openTun(argv[optind], &config, originalNs);
    int clientFd = openTun(argv[optind + 1], &config, originalNs);
    close(originalNs);

    int64_t now = monotonicNs();
    struct direction directions[2];
    initDirection(&directions[0], "server->client", serverFd, clientFd, &config, now);
    initDirection(&directions[1], "client->server", clientFd, serverFd, &config, now);

    if (printf("ready\n") < 0 || fflush(stdout) != 0)
        die("write ready");

    struct pollfd fds[2] = {
        {.fd = serverFd, .events = POLLIN},
        {.fd = clientFd, .events = POLLIN},
    };
    while (!stopRequested) {
        now = monotonicNs();
        int64_t next = INT64_MAX;
        for (int i = 0; i < 2; i++) {
            struct direction *d = &directions[i];
            deliver(d, now);
            if (d->count > 0 && d->packets[d->head].due < next)
                next = d->packets[d->head].due;
        }
        struct timespec timeout, *timeoutPointer = NULL;
        if (next != INT64_MAX) {
            int64_t wait = next - monotonicNs();
            if (wait < 0)
                wait = 0;
            timeout.tv_sec = wait / 1000000000;
            timeout.tv_nsec = wait % 1000000000;
            timeoutPointer = &timeout;
        }
        int ready = ppoll(fds, 2, timeoutPointer, &waitMask);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            die("ppoll");
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
                fprintf(stderr, "delayline: device %d failed (revents %#x)\n", i, fds[i].revents);
                return 1;
            }
            if (fds[i].revents & POLLIN)
                receive(&directions[i], &config);
        }
    }
    if (config.stats) {
        printStats(&directions[0]);
        printStats(&directions[1]);
    }
    return 0;
}
