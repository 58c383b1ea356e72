# Socket calls on a transport's fd, for the compiled transports (setup.py).
#
# Each function does what the named method of a non-blocking socket.socket does, result and
# exceptions alike, without the method call: recv(2), send(2), recvfrom(2) or sendto(2) on
# the fd, with the GIL held (the socket is non-blocking, so the call never waits).  The
# transports call them only under `if cython.compiled:`, on a socket whose class is exactly
# socket.socket (socketcalls.calls_reach_the_fd).
#
# OS and CPython facts they rely on:
# * socket.socket's recv, send, recvfrom and sendto make one system call, retried after EINTR
#   once the signal handlers have run (PEP 475; an exception from a handler propagates), and
#   raise OSError(errno) for any other failure: PyErr_SetFromErrno picks the same subclass
#   (BlockingIOError for EAGAIN, ConnectionResetError, ...).
# * recv(n) and recvfrom(n) return a bytes object of the size received.  Reads of up to
#   64 KiB go into one static buffer and are copied out: a copy of what arrived costs less
#   than allocating n bytes and shrinking them (one read at a time: the GIL is held
#   throughout).  Larger reads (a stream's 256 KiB bulk reads) go straight into a bytes
#   object of n bytes that is shrunk afterwards, one copy by the kernel, as socket does.
# * recvfrom's address is (host, port) for AF_INET and (host, port, flowinfo, scope_id) for
#   AF_INET6, host in inet_ntop's text form (dotted decimal for IPv4).  A tuple is
#   immutable, so a datagram from the sender of the one before gets that same tuple.
# * Parsing such a tuple back (sendto) gives the sockaddr it was made of, so a reply to the
#   address a datagram came from can reuse the raw sockaddr: `sendto_peer` sends to the one
#   `recvfrom_inet` last stored in `peer`.
# * sendto raises the audit event "socket.sendto" (socket, address); send and recv none.

cdef extern from *:
    """
    #include <errno.h>
    #include <string.h>
    #include <sys/socket.h>
    #include <netinet/in.h>
    #include <arpa/inet.h>

    /* A failed call: 1 to retry it (EINTR, no exception from a signal handler), 0 with the
       exception set. */
    static inline int snakeloop_retry_or_raise(void) {
        if (errno == EINTR) {
            return PyErr_CheckSignals() == 0;
        }
        PyErr_SetFromErrno(PyExc_OSError);
        return 0;
    }

    /* Reads of up to this many bytes go through one static buffer (see the notes above). */
    #define SNAKELOOP_COPIED_READ_MAX (64 * 1024)
    static char snakeloop_read_buffer[SNAKELOOP_COPIED_READ_MAX];

    static inline PyObject *snakeloop_sock_recv(int fd, Py_ssize_t size) {
        if (size <= SNAKELOOP_COPIED_READ_MAX) {
            for (;;) {
                ssize_t got = recv(fd, snakeloop_read_buffer, (size_t)size, 0);
                if (got >= 0) {
                    return PyBytes_FromStringAndSize(snakeloop_read_buffer, (Py_ssize_t)got);
                }
                if (!snakeloop_retry_or_raise()) {
                    return NULL;
                }
            }
        }
        PyObject *data = PyBytes_FromStringAndSize(NULL, size);
        if (data == NULL) {
            return NULL;
        }
        for (;;) {
            ssize_t got = recv(fd, PyBytes_AS_STRING(data), (size_t)size, 0);
            if (got >= 0) {
                if (got != size && _PyBytes_Resize(&data, (Py_ssize_t)got) < 0) {
                    return NULL;
                }
                return data;
            }
            if (!snakeloop_retry_or_raise()) {
                Py_DECREF(data);
                return NULL;
            }
        }
    }

    /* data must be a bytes object. */
    static inline Py_ssize_t snakeloop_sock_send(int fd, PyObject *data) {
        for (;;) {
            ssize_t sent = send(fd, PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data), 0);
            if (sent >= 0) {
                return (Py_ssize_t)sent;
            }
            if (!snakeloop_retry_or_raise()) {
                return -1;
            }
        }
    }

    /* The text inet_ntop gives for an IPv4 address: dotted decimal. */
    static inline PyObject *snakeloop_ipv4_text(const struct in_addr *addr) {
        const unsigned char *octets = (const unsigned char *)&addr->s_addr;
        char text[INET_ADDRSTRLEN];
        char *end = text;
        for (int i = 0; i < 4; i++) {
            unsigned int octet = octets[i];
            if (octet >= 100) {
                *end++ = (char)('0' + octet / 100);
            }
            if (octet >= 10) {
                *end++ = (char)('0' + octet / 10 % 10);
            }
            *end++ = (char)('0' + octet % 10);
            if (i < 3) {
                *end++ = '.';
            }
        }
        return PyUnicode_DecodeASCII(text, end - text, NULL);
    }

    /* The address tuple socket.recvfrom makes for an AF_INET or AF_INET6 sockaddr. */
    static inline PyObject *snakeloop_inet_address(const struct sockaddr_storage *ss) {
        PyObject *host, *address;
        if (ss->ss_family == AF_INET) {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
            host = snakeloop_ipv4_text(&sin->sin_addr);
            if (host == NULL) {
                return NULL;
            }
            address = PyTuple_New(2);
            if (address == NULL) {
                Py_DECREF(host);
                return NULL;
            }
            PyTuple_SET_ITEM(address, 0, host);
            PyObject *port = PyLong_FromLong(ntohs(sin->sin_port));
            if (port == NULL) {
                Py_DECREF(address);
                return NULL;
            }
            PyTuple_SET_ITEM(address, 1, port);
            return address;
        }
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        char text[INET6_ADDRSTRLEN];
        if (inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text)) == NULL) {
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        return Py_BuildValue("siII", text, ntohs(sin6->sin6_port),
                             ntohl(sin6->sin6_flowinfo), sin6->sin6_scope_id);
    }

    /* Whether two AF_INET or AF_INET6 sockaddrs name the same sender. */
    static inline int snakeloop_same_inet_sender(const struct sockaddr_storage *a,
                                                 const struct sockaddr_storage *b) {
        if (a->ss_family != b->ss_family) {
            return 0;
        }
        if (a->ss_family == AF_INET) {
            const struct sockaddr_in *x = (const struct sockaddr_in *)a;
            const struct sockaddr_in *y = (const struct sockaddr_in *)b;
            return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
        }
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
        const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)b;
        return x->sin6_port == y->sin6_port && x->sin6_flowinfo == y->sin6_flowinfo
            && x->sin6_scope_id == y->sin6_scope_id
            && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }

    /* socket.recvfrom(size) of an AF_INET or AF_INET6 socket, as (data, address).  peer, a
       bytearray of sizeof(struct sockaddr_storage) bytes, holds the sender of the datagram
       read before, whose address tuple is last_address (None before the first): a datagram
       from the same sender gets that same tuple, and one from another sender a new tuple,
       its sockaddr stored in peer. */
    static inline PyObject *snakeloop_sock_recvfrom_inet(int fd, Py_ssize_t size,
                                                         PyObject *peer,
                                                         PyObject *last_address) {
        struct sockaddr_storage *last = (struct sockaddr_storage *)PyByteArray_AS_STRING(peer);
        struct sockaddr_storage sender;
        ssize_t got;
        PyObject *data = NULL, *address, *pair;
        for (;;) {
            socklen_t sender_size = sizeof(sender);
            if (size <= SNAKELOOP_COPIED_READ_MAX) {
                got = recvfrom(fd, snakeloop_read_buffer, (size_t)size, 0,
                               (struct sockaddr *)&sender, &sender_size);
            }
            else {
                if (data == NULL && (data = PyBytes_FromStringAndSize(NULL, size)) == NULL) {
                    return NULL;
                }
                got = recvfrom(fd, PyBytes_AS_STRING(data), (size_t)size, 0,
                               (struct sockaddr *)&sender, &sender_size);
            }
            if (got >= 0) {
                break;
            }
            if (!snakeloop_retry_or_raise()) {
                Py_XDECREF(data);
                return NULL;
            }
        }
        if (data == NULL) {
            data = PyBytes_FromStringAndSize(snakeloop_read_buffer, (Py_ssize_t)got);
        }
        else if (got != size) {
            _PyBytes_Resize(&data, (Py_ssize_t)got);
        }
        if (data == NULL) {
            return NULL;
        }
        if (last_address != Py_None && snakeloop_same_inet_sender(&sender, last)) {
            Py_INCREF(last_address);
            address = last_address;
        }
        else {
            address = snakeloop_inet_address(&sender);
            if (address == NULL) {
                Py_DECREF(data);
                return NULL;
            }
            memcpy(last, &sender, sizeof(sender));
        }
        pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(data);
            Py_DECREF(address);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 0, data);
        PyTuple_SET_ITEM(pair, 1, address);
        return pair;
    }

    /* socket.sendto(data, address) where address is the tuple that the last
       snakeloop_sock_recvfrom_inet on peer returned; data must be a bytes object. */
    static inline Py_ssize_t snakeloop_sock_sendto_peer(int fd, PyObject *data, PyObject *peer,
                                                 PyObject *sock, PyObject *address) {
        const struct sockaddr_storage *ss =
            (const struct sockaddr_storage *)PyByteArray_AS_STRING(peer);
        socklen_t sslen = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                   : sizeof(struct sockaddr_in6);
        if (PySys_Audit("socket.sendto", "OO", sock, address) < 0) {
            return -1;
        }
        for (;;) {
            ssize_t sent = sendto(fd, PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data),
                                  0, (const struct sockaddr *)ss, sslen);
            if (sent >= 0) {
                return (Py_ssize_t)sent;
            }
            if (!snakeloop_retry_or_raise()) {
                return -1;
            }
        }
    }
    """
    const Py_ssize_t SOCKADDR_STORAGE_SIZE "sizeof(struct sockaddr_storage)"
    object sock_recv "snakeloop_sock_recv"(int fd, Py_ssize_t size)
    Py_ssize_t sock_send "snakeloop_sock_send"(int fd, bytes data) except -1
    tuple sock_recvfrom_inet "snakeloop_sock_recvfrom_inet"(int fd, Py_ssize_t size, bytearray peer, object last_address)
    Py_ssize_t sock_sendto_peer "snakeloop_sock_sendto_peer"(int fd, bytes data, bytearray peer, object sock, object address) except -1
