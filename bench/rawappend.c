/*
 * rawappend: the practical ceiling of an IMAP server's APPEND path.
 *
 * One TCP connection with TCP_NODELAY; LOGIN; optionally SELECT the target
 * mailbox; then back-to-back APPEND commands, one message each or
 * MULTIAPPEND batches (--batch N), every message read from a Maildir
 * (INBOX and its Maildir++ subfolders, "cur" and "new"), its bare LFs turned
 * into CRLF, its flags taken from the ":2," info and its INTERNALDATE from
 * the file's mtime.  Everything goes into one mailbox (--mailbox, INBOX by
 * default).
 *
 * Each command is written with one writev (more only when the socket buffer
 * is full); replies are read as they come (poll on read and write), tagged
 * replies counted, and the writer stops when every command is acknowledged.
 * At most --window octets (64 MiB by default) are in flight unacknowledged.
 *
 * Literal modes (--literal):
 *   plus   {N+} for every literal (LITERAL+, RFC 7888)
 *   minus  {N+} up to 4096 octets, synchronizing {N} above (LITERAL-)
 *   sync   synchronizing {N} for every literal (plain IMAP4rev1)
 * A synchronizing literal waits for the server's "+" before its octets;
 * the commands before it stay in flight.  With --sync-wait, a command with
 * a synchronizing literal is not started before every earlier command has
 * its tagged reply (against a server that leaves Nagle on, the "+" would
 * otherwise wait behind the earlier reply for the client's delayed ACK).
 *
 * --connections N forks N-1 more processes; each logs in on its own
 * connection and appends every N-th message (its share), and the first
 * exits 0 only when every one did.  With --mailbox-per-connection the
 * share k > 0 appends into a mailbox of its own, "<mailbox>-k", created
 * first, so that the connections do not take turns at one mailbox's lock
 * (as a client writing each folder on its own connection does not).
 *
 * On success it prints one JSON object on standard output:
 *   {"messages": N, "octets": N, "commands": N, "ok": N, "no": N}
 * and exits 0 when every command was answered OK.
 *
 * --tls implicit|starttls (with --ca FILE, the PEM of the CA to verify the
 * server's certificate against, and its name or address --host) speaks
 * TLS through OpenSSL: implicit from the connection's start (imaps), or
 * after STARTTLS on the plain port.  Each iovec is handed to SSL_write as
 * it stands (a body is one call, never joined with its command's other
 * parts), so the raw client pays TLS's own cost and no copy of its own.
 *
 * Build: gcc -O2 -Wall -o rawappend rawappend.c -lssl -lcrypto
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define LITERAL_PLUS 0
#define LITERAL_MINUS 1
#define LITERAL_SYNC 2
#define LITERAL_MINUS_LIMIT 4096
#define MAX_IOV 1024
#define BATCH_BYTES (8u << 20)

struct options {
    const char *host, *port, *user, *password, *maildir, *mailbox, *tls, *ca;
    int select, batch, literal, syncWait, connections, mailboxPerConnection;
    size_t window;
    long limit;
};

struct files {
    char **paths;
    size_t count, capacity;
};

/* The command being written: its iovecs, the buffers to free, and the
 * indexes of iovecs that may only be written after a continuation. */
struct command {
    struct iovec iov[MAX_IOV];
    int iovCount, iovNext;
    int barrier[MAX_IOV];
    int barrierCount, barrierNext;
    void *owned[MAX_IOV];
    int ownedCount;
    size_t octets;
    int active;
    int hasSync; /* it holds a synchronizing literal */
};

static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs("rawappend: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(2);
}

static void *xmalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p)
        die("out of memory");
    return p;
}

static void addFile(struct files *files, const char *path) {
    if (files->count == files->capacity) {
        files->capacity = files->capacity ? files->capacity * 2 : 1024;
        files->paths = realloc(files->paths, files->capacity * sizeof(char *));
        if (!files->paths)
            die("out of memory");
    }
    files->paths[files->count++] = strdup(path);
}

static void listMessages(struct files *files, const char *folder) {
    static const char *subs[] = {"cur", "new"};
    for (int i = 0; i < 2; i++) {
        char dirPath[4096];
        snprintf(dirPath, sizeof dirPath, "%s/%s", folder, subs[i]);
        DIR *dir = opendir(dirPath);
        if (!dir)
            continue;
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
            if (entry->d_name[0] == '.')
                continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dirPath, entry->d_name);
            addFile(files, path);
        }
        closedir(dir);
    }
}

static int comparePaths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void listMaildir(struct files *files, const char *root) {
    listMessages(files, root);
    DIR *dir = opendir(root);
    if (!dir)
        die("cannot open the Maildir %s: %s", root, strerror(errno));
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] != '.' || !strcmp(entry->d_name, ".") || !strcmp(entry->d_name, ".."))
            continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", root, entry->d_name);
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            listMessages(files, path);
    }
    closedir(dir);
    qsort(files->paths, files->count, sizeof(char *), comparePaths);
}

/* Read a message file; return it with CRLF line endings. */
static char *readMessage(const char *path, size_t *length, time_t *mtime) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0)
        die("cannot stat %s: %s", path, strerror(errno));
    size_t size = (size_t)st.st_size;
    char *raw = xmalloc(size);
    size_t done = 0;
    while (done < size) {
        ssize_t n = read(fd, raw + done, size - done);
        if (n <= 0)
            die("cannot read %s", path);
        done += (size_t)n;
    }
    close(fd);
    *mtime = st.st_mtime;
    size_t bare = 0;
    for (char *p = raw; (p = memchr(p, '\n', (size_t)(raw + size - p))) != NULL; p++)
        if (p == raw || p[-1] != '\r')
            bare++;
    if (!bare) {
        *length = size;
        return raw;
    }
    char *out = xmalloc(size + bare);
    char *q = out, *start = raw, *end = raw + size, *p;
    while ((p = memchr(start, '\n', (size_t)(end - start))) != NULL) {
        size_t chunk = (size_t)(p - start);
        memcpy(q, start, chunk);
        q += chunk;
        if (p == raw || p[-1] != '\r')
            *q++ = '\r';
        *q++ = '\n';
        start = p + 1;
    }
    memcpy(q, start, (size_t)(end - start));
    q += end - start;
    free(raw);
    *length = (size_t)(q - out);
    return out;
}

/* "(\Seen \Flagged) "01-Jan-2020 10:00:00 +0000" " for one file. */
static int messageAttributes(const char *path, time_t mtime, char *out, size_t size) {
    static const struct {
        char letter;
        const char *flag;
    } table[] = {{'D', "\\Draft"}, {'F', "\\Flagged"}, {'R', "\\Answered"},
                 {'S', "\\Seen"}, {'T', "\\Deleted"}};
    char flags[128] = "";
    const char *info = strstr(strrchr(path, '/') ? strrchr(path, '/') : path, ":2,");
    if (info) {
        for (const char *c = info + 3; *c; c++)
            for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
                if (*c == table[i].letter) {
                    if (flags[0])
                        strcat(flags, " ");
                    strcat(flags, table[i].flag);
                }
    }
    struct tm tm;
    gmtime_r(&mtime, &tm);
    char date[64];
    strftime(date, sizeof date, "%d-%b-%Y %H:%M:%S +0000", &tm);
    return snprintf(out, size, "(%s) \"%s\" ", flags, date);
}

static int connectTo(const char *host, const char *port) {
    struct addrinfo hints = {0}, *result, *ai;
    hints.ai_socktype = SOCK_STREAM;
    int error = getaddrinfo(host, port, &hints, &result);
    if (error)
        die("cannot resolve %s: %s", host, gai_strerror(error));
    int fd = -1;
    for (ai = result; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(result);
    if (fd < 0)
        die("cannot connect to %s:%s: %s", host, port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Buffered line reading shared by the blocking and the polling phases. */
static char inbuf[1 << 20];
static size_t inLength;
/* The TLS session once it is up (--tls), else NULL: plain TCP. */
static SSL *tls;

/* read(2) or SSL_read: -1 with errno EAGAIN when nothing can be read now. */
static ssize_t readSome(int fd, void *buffer, size_t length) {
    if (!tls)
        return read(fd, buffer, length);
    int n = SSL_read(tls, buffer, length > (1u << 30) ? 1 << 30 : (int)length);
    if (n > 0)
        return n;
    int error = SSL_get_error(tls, n);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (error == SSL_ERROR_ZERO_RETURN)
        return 0;
    die("TLS read failed (SSL error %d, %lu)", error, ERR_get_error());
    return -1;
}

/* writev(2), or SSL_write of the iovecs in turn (each a write of its own
 * to the TLS layer, never copied together first). */
static ssize_t writeSome(int fd, const struct iovec *iov, int count) {
    if (!tls)
        return writev(fd, iov, count);
    ssize_t done = 0;
    for (int i = 0; i < count; i++) {
        size_t length = iov[i].iov_len;
        int n = SSL_write(tls, iov[i].iov_base, length > (1u << 30) ? 1 << 30 : (int)length);
        if (n <= 0) {
            int error = SSL_get_error(tls, n);
            if (error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ)
                die("TLS write failed (SSL error %d, %lu)", error, ERR_get_error());
            if (done)
                return done;
            errno = EAGAIN;
            return -1;
        }
        done += n;
        if ((size_t)n < length)
            return done;
    }
    return done;
}

/* The TLS handshake on the blocking socket, the certificate verified
 * against --ca and the name or address --host. */
static void startTLS(int fd, const struct options *o) {
    SSL_CTX *context = SSL_CTX_new(TLS_client_method());
    if (!context)
        die("SSL_CTX_new failed");
    if (o->ca && SSL_CTX_load_verify_locations(context, o->ca, NULL) != 1)
        die("cannot load the CA %s", o->ca);
    if (!o->ca)
        SSL_CTX_set_default_verify_paths(context);
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, NULL);
    tls = SSL_new(context);
    SSL_set_mode(tls, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    X509_VERIFY_PARAM *param = SSL_get0_param(tls);
    unsigned char address[16];
    if (inet_pton(AF_INET, o->host, address) == 1 || inet_pton(AF_INET6, o->host, address) == 1)
        X509_VERIFY_PARAM_set1_ip_asc(param, o->host);
    else {
        X509_VERIFY_PARAM_set1_host(param, o->host, 0);
        SSL_set_tlsext_host_name(tls, o->host);
    }
    SSL_set_fd(tls, fd);
    if (SSL_connect(tls) != 1)
        die("TLS handshake failed: %s", ERR_error_string(ERR_get_error(), NULL));
}

static int takeLine(char *line, size_t size) {
    char *end = memchr(inbuf, '\n', inLength);
    if (!end)
        return 0;
    size_t n = (size_t)(end - inbuf) + 1;
    size_t copy = n < size - 1 ? n : size - 1;
    memcpy(line, inbuf, copy);
    line[copy] = 0;
    memmove(inbuf, inbuf + n, inLength - n);
    inLength -= n;
    return 1;
}

static int fillBuffer(int fd) {
    if (inLength == sizeof inbuf)
        die("reply line too long");
    ssize_t n = readSome(fd, inbuf + inLength, sizeof inbuf - inLength);
    if (n == 0)
        die("the server closed the connection");
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        die("read: %s", strerror(errno));
    }
    inLength += (size_t)n;
    return 1;
}

static void writeAll(int fd, const char *data, size_t length) {
    while (length) {
        struct iovec v = {(void *)data, length};
        ssize_t n = writeSome(fd, &v, 1);
        if (n < 0)
            die("write: %s", strerror(errno));
        data += n;
        length -= (size_t)n;
    }
}

/* Send a command and wait for its tagged reply; die unless OK. */
static void simpleCommand(int fd, const char *tag, const char *text) {
    char line[8192];
    snprintf(line, sizeof line, "%s %s\r\n", tag, text);
    writeAll(fd, line, strlen(line));
    size_t tagLength = strlen(tag);
    for (;;) {
        while (!takeLine(line, sizeof line))
            fillBuffer(fd);
        if (!strncmp(line, tag, tagLength) && line[tagLength] == ' ') {
            if (strncmp(line + tagLength + 1, "OK", 2))
                die("%s failed: %s", text, line);
            return;
        }
    }
}

static void commandAdd(struct command *c, void *base, size_t length, int owned) {
    if (c->iovCount == MAX_IOV)
        die("too many iovecs");
    c->iov[c->iovCount].iov_base = base;
    c->iov[c->iovCount].iov_len = length;
    c->iovCount++;
    c->octets += length;
    if (owned)
        c->owned[c->ownedCount++] = base;
}

static void usage(void) {
    fputs("usage: rawappend --host H --port P --user U --password PW --maildir DIR\n"
          "       [--mailbox INBOX] [--select] [--batch N] [--literal plus|minus|sync]\n"
          "       [--window OCTETS] [--limit N] [--sync-wait] [--connections N]\n"
          "       [--mailbox-per-connection] [--tls implicit|starttls] [--ca FILE]\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv) {
    struct options o = {0};
    o.mailbox = "INBOX";
    o.batch = 1;
    o.literal = LITERAL_PLUS;
    o.window = 64u << 20;
    o.connections = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--select")) {
            o.select = 1;
            continue;
        }
        if (!strcmp(a, "--mailbox-per-connection")) {
            o.mailboxPerConnection = 1;
            continue;
        }
        if (!strcmp(a, "--sync-wait")) {
            o.syncWait = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--host"))
            o.host = v;
        else if (!strcmp(a, "--port"))
            o.port = v;
        else if (!strcmp(a, "--user"))
            o.user = v;
        else if (!strcmp(a, "--password"))
            o.password = v;
        else if (!strcmp(a, "--maildir"))
            o.maildir = v;
        else if (!strcmp(a, "--mailbox"))
            o.mailbox = v;
        else if (!strcmp(a, "--batch"))
            o.batch = atoi(v);
        else if (!strcmp(a, "--window"))
            o.window = (size_t)atoll(v);
        else if (!strcmp(a, "--limit"))
            o.limit = atol(v);
        else if (!strcmp(a, "--connections"))
            o.connections = atoi(v);
        else if (!strcmp(a, "--tls")) {
            if (strcmp(v, "implicit") && strcmp(v, "starttls"))
                usage();
            o.tls = v;
        } else if (!strcmp(a, "--ca"))
            o.ca = v;
        else if (!strcmp(a, "--literal")) {
            if (!strcmp(v, "plus"))
                o.literal = LITERAL_PLUS;
            else if (!strcmp(v, "minus"))
                o.literal = LITERAL_MINUS;
            else if (!strcmp(v, "sync"))
                o.literal = LITERAL_SYNC;
            else
                usage();
        } else
            usage();
    }
    if (!o.host || !o.port || !o.user || !o.password || !o.maildir || o.batch < 1 ||
        o.batch > MAX_IOV / 4 - 1 || o.connections < 1)
        usage();

    /* Each process takes every N-th message from its share's index on. */
    int share = 0;
    pid_t children[64];
    if (o.connections > 64)
        usage();
    for (int k = 1; k < o.connections; k++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0) {
            share = k;
            break;
        }
        children[k] = pid;
    }

    int fd = connectTo(o.host, o.port);
    if (o.tls && !strcmp(o.tls, "implicit"))
        startTLS(fd, &o);
    char line[8192];
    while (!takeLine(line, sizeof line))
        fillBuffer(fd);
    if (strncmp(line, "* OK", 4))
        die("unexpected greeting: %s", line);
    if (o.tls && !strcmp(o.tls, "starttls")) {
        simpleCommand(fd, "T", "STARTTLS");
        startTLS(fd, &o);
    }
    char text[4096];
    snprintf(text, sizeof text, "LOGIN \"%s\" \"%s\"", o.user, o.password);
    simpleCommand(fd, "L", text);
    if (o.mailboxPerConnection && share > 0) {
        char *own = xmalloc(strlen(o.mailbox) + 16);
        sprintf(own, "%s-%d", o.mailbox, share);
        o.mailbox = own;
        snprintf(text, sizeof text, "CREATE \"%s\"", o.mailbox);
        simpleCommand(fd, "C", text);
    }
    if (o.select) {
        snprintf(text, sizeof text, "SELECT \"%s\"", o.mailbox);
        simpleCommand(fd, "S", text);
    }

    struct files files = {0};
    listMaildir(&files, o.maildir);
    if (o.connections > 1) {
        size_t kept = 0;
        for (size_t i = (size_t)share; i < files.count; i += (size_t)o.connections)
            files.paths[kept++] = files.paths[i];
        files.count = kept;
    }
    size_t total = files.count;
    if (o.limit > 0 && (size_t)o.limit < total)
        total = (size_t)o.limit;
    size_t commandsMax = total + 1;
    size_t *commandOctets = xmalloc(commandsMax * sizeof(size_t));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    static struct command c;
    size_t next = 0, sent = 0, acked = 0, ok = 0, no = 0, octets = 0;
    size_t inFlight = 0;
    int continuation = 0; /* a "+" arrived for the current barrier */
    while (next < total || c.active || acked < sent) {
        /* Build the next command when the previous one is written. */
        if (!c.active && next < total && inFlight < o.window) {
            memset(&c, 0, sizeof c);
            c.active = 1;
            char *head = xmalloc(64 + strlen(o.mailbox));
            int headLength = sprintf(head, "A%zu APPEND \"%s\" ", sent, o.mailbox);
            commandAdd(&c, head, (size_t)headLength, 1);
            size_t batchOctets = 0;
            for (int k = 0; k < o.batch && next < total && batchOctets < BATCH_BYTES; k++) {
                size_t length;
                time_t mtime;
                char *body = readMessage(files.paths[next], &length, &mtime);
                next++;
                char *attributes = xmalloc(256);
                int n = messageAttributes(files.paths[next - 1], mtime, attributes, 200);
                int sync = o.literal == LITERAL_SYNC ||
                           (o.literal == LITERAL_MINUS && length > LITERAL_MINUS_LIMIT);
                n += sprintf(attributes + n, sync ? "{%zu}\r\n" : "{%zu+}\r\n", length);
                if (k > 0) {
                    /* separate from the previous literal */
                    memmove(attributes + 1, attributes, (size_t)n + 1);
                    attributes[0] = ' ';
                    n++;
                }
                commandAdd(&c, attributes, (size_t)n, 1);
                if (sync) {
                    c.barrier[c.barrierCount++] = c.iovCount;
                    c.hasSync = 1;
                }
                commandAdd(&c, body, length, 1);
                batchOctets += length;
                octets += length;
            }
            commandAdd(&c, "\r\n", 2, 0);
            commandOctets[sent] = c.octets;
            inFlight += c.octets;
            sent++;
            continuation = 0;
        }

        struct pollfd pfd = {fd, POLLIN, 0};
        /* This command is number sent - 1: with --sync-wait, one holding a
         * synchronizing literal starts once the earlier ones are answered. */
        int held = o.syncWait && c.active && c.hasSync && c.iovNext == 0 && acked + 1 < sent;
        int writable = c.active && !held &&
                       (c.barrierNext == c.barrierCount || c.iovNext < c.barrier[c.barrierNext] ||
                        continuation);
        if (writable)
            pfd.events |= POLLOUT;
        if (poll(&pfd, 1, 120000) <= 0)
            die("poll: timeout or error");
        if (pfd.revents & (POLLERR | POLLHUP) && !(pfd.revents & POLLIN))
            die("connection error");

        if (writable && (pfd.revents & POLLOUT)) {
            if (c.barrierNext < c.barrierCount && c.iovNext == c.barrier[c.barrierNext]) {
                c.barrierNext++;
                continuation = 0;
            }
            int end = c.barrierNext < c.barrierCount ? c.barrier[c.barrierNext] : c.iovCount;
            ssize_t n = writeSome(fd, c.iov + c.iovNext, end - c.iovNext);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                die("writev: %s", strerror(errno));
            while (n > 0) {
                struct iovec *v = &c.iov[c.iovNext];
                if ((size_t)n >= v->iov_len) {
                    n -= (ssize_t)v->iov_len;
                    c.iovNext++;
                } else {
                    v->iov_base = (char *)v->iov_base + n;
                    v->iov_len -= (size_t)n;
                    n = 0;
                }
            }
            if (c.iovNext == c.iovCount) {
                for (int i = 0; i < c.ownedCount; i++)
                    free(c.owned[i]);
                c.active = 0;
            }
        }
        /* TLS may hold decrypted octets the socket no longer shows. */
        for (int more = pfd.revents & POLLIN; more; more = tls && SSL_pending(tls) > 0) {
            fillBuffer(fd);
            while (takeLine(line, sizeof line)) {
                if (line[0] == '+') {
                    continuation = 1;
                } else if (line[0] == 'A') {
                    char *space = strchr(line, ' ');
                    if (!space)
                        continue;
                    size_t tag = (size_t)strtoul(line + 1, NULL, 10);
                    if (tag < sent)
                        inFlight -= commandOctets[tag];
                    acked++;
                    if (!strncmp(space + 1, "OK", 2))
                        ok++;
                    else {
                        no++;
                        fprintf(stderr, "rawappend: %s", line);
                    }
                } else if (!strncmp(line, "* BYE", 5)) {
                    die("server said %s", line);
                }
            }
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    simpleCommand(fd, "Z", "LOGOUT");
    close(fd);
    printf("{\"messages\": %zu, \"octets\": %zu, \"commands\": %zu, \"ok\": %zu, \"no\": %zu}\n",
           next, octets, sent, ok, no);
    fflush(stdout);
    int failed = no != 0;
    if (share == 0) {
        for (int k = 1; k < o.connections; k++) {
            int status;
            if (waitpid(children[k], &status, 0) < 0 || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0)
                failed = 1;
        }
    }
    return failed;
}
