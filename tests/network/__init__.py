"""Tests of streams, servers, sockets, sendfile, datagrams and TLS."""
