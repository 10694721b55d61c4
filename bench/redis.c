/*
 * redis.c: just enough of the Redis protocol (RESP2) for the reference
 * measurement in pairs.c: connect over TCP to 127.0.0.1, send a command as
 * an array of bulk strings, read one reply.  Replies are returned as text:
 * "+OK" -> "OK", ":1" -> "1", a bulk string -> its bytes, nil -> "(nil)",
 * errors end the program.  Only the reply kinds our commands produce are
 * handled (no arrays).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

/* redis_connect: a TCP connection to 127.0.0.1:port (retried for 5 s). */
int
redis_connect(int port)
{
	struct sockaddr_in sa;
	double		give_up = now_s() + 5;
	int			one = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (;;)
	{
		int			fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0)
			die("socket: %m");
		if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0)
		{
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			return fd;
		}
		close(fd);
		if (now_s() > give_up)
			die("cannot connect to redis on port %d: %m", port);
		sleep_s(0.05);
	}
}

/* write_all: write the whole buffer. */
static void
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, buf, len);

		if (n <= 0)
			die("redis write: %m");
		buf += n;
		len -= n;
	}
}

/*
 * A read buffer per thread: each client thread talks to Redis over one
 * connection at a time, and a reply usually arrives in one read().
 */
static __thread char rbuf[4096];
static __thread size_t rstart,
			rend;
static __thread int rfd = -1;

/* read_byte: the next byte of the reply stream on fd. */
static char
read_byte(int fd)
{
	if (rfd != fd)
	{
		rfd = fd;
		rstart = rend = 0;
	}
	if (rstart == rend)
	{
		ssize_t		n = read(fd, rbuf, sizeof(rbuf));

		if (n <= 0)
			die("redis read: connection lost");
		rstart = 0;
		rend = n;
	}
	return rbuf[rstart++];
}

/* read_line: one reply line, without its "\r\n", into buf. */
static void
read_line(int fd, char *buf, size_t size)
{
	size_t		len = 0;

	for (;;)
	{
		char		ch = read_byte(fd);

		if (ch == '\n' && len > 0 && buf[len - 1] == '\r')
		{
			buf[len - 1] = '\0';
			return;
		}
		if (len + 1 >= size)
			die("redis reply line too long");
		buf[len++] = ch;
	}
}

/* read_exact: exactly len bytes of the reply stream. */
static void
read_exact(int fd, char *buf, size_t len)
{
	while (len-- > 0)
		*buf++ = read_byte(fd);
}

/*
 * redis_cmd: send one command, return its reply as a malloc'd string.
 * The request goes out in a single write (one packet on loopback).
 */
char *
redis_cmd(int fd, int argc, const char *const *argv)
{
	char		req[4096];
	char		line[256];
	size_t		len;
	int			i;

	len = snprintf(req, sizeof(req), "*%d\r\n", argc);
	for (i = 0; i < argc; i++)
	{
		size_t		alen = strlen(argv[i]);

		if (len + alen + 32 > sizeof(req))
			die("redis command too long");
		len += snprintf(req + len, sizeof(req) - len, "$%zu\r\n", alen);
		memcpy(req + len, argv[i], alen);
		len += alen;
		req[len++] = '\r';
		req[len++] = '\n';
	}
	write_all(fd, req, len);

	read_line(fd, line, sizeof(line));
	switch (line[0])
	{
		case '+':
		case ':':
			return strdup(line + 1);
		case '-':
			die("redis %s: %s", argv[0], line + 1);
		case '$':
			{
				long		blen = atol(line + 1);
				char	   *body;

				if (blen < 0)
					return strdup("(nil)");
				body = malloc(blen + 3);
				if (body == NULL)
					die("out of memory");
				read_exact(fd, body, blen + 2);
				body[blen] = '\0';
				return body;
			}
		default:
			die("unexpected redis reply \"%s\"", line);
	}
}

/* redis_close: close the connection. */
void
redis_close(int fd)
{
	if (rfd == fd)
		rfd = -1;
	close(fd);
}
