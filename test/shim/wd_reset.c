/*
 * wd_reset.c - LD_PRELOAD shim for test/t/055_run_reset.pl: forces the
 * race of issue 33 defect 12 in "dlock run".  The watchdog's send of
 * WD_EXITED is delayed (the client renews meanwhile and sends deadlines
 * the watchdog never reads); the client reads WD_EXITED only once the
 * watchdog has exited, so its end of the socket holds ECONNRESET.
 * The message layout and WD_EXITED mirror cli/dlock.h.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef struct
{
	int32_t		type;
	int32_t		arg;
	int64_t		value;
} Msg;

#define WD_EXITED 6

static pid_t watchdog_pid;		/* in the client: its forked child */

static int
is_seqpacket(int fd)
{
	int			t = 0;
	socklen_t	l = sizeof(t);
	int			saved = errno;
	int			r = getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &l) == 0 && t == SOCK_SEQPACKET;

	errno = saved;
	return r;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* exited: the watchdog is a zombie (or gone). */
static int
exited(pid_t pid)
{
	char		path[64], buf[256];
	int			fd;
	ssize_t		n;
	char	   *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p == NULL || p[1] == '\0' || p[2] == 'Z' || p[2] == 'X';
}

pid_t
fork(void)
{
	pid_t		(*real) (void) = (pid_t (*) (void)) dlsym(RTLD_NEXT, "fork");
	pid_t		pid = real();

	if (pid > 0)
		watchdog_pid = pid;
	else if (pid == 0)
		watchdog_pid = 0;
	return pid;
}

ssize_t
send(int fd, const void *buf, size_t len, int flags)
{
	ssize_t		(*real) (int, const void *, size_t, int) =
		(ssize_t (*) (int, const void *, size_t, int)) dlsym(RTLD_NEXT, "send");

	if (len == sizeof(Msg) && ((const Msg *) buf)->type == WD_EXITED && is_seqpacket(fd))
		sleep_ms(1500);
	return real(fd, buf, len, flags);
}

ssize_t
recv(int fd, void *buf, size_t len, int flags)
{
	ssize_t		(*real) (int, void *, size_t, int) =
		(ssize_t (*) (int, void *, size_t, int)) dlsym(RTLD_NEXT, "recv");

	if (watchdog_pid > 0 && len == sizeof(Msg) && is_seqpacket(fd))
	{
		Msg			m;
		ssize_t		n = real(fd, &m, sizeof(m), MSG_PEEK | MSG_DONTWAIT);

		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return n;			/* the peek took the error: pass it on */
		if (n == (ssize_t) sizeof(m) && m.type == WD_EXITED)
		{
			for (int i = 0; i < 1000 && !exited(watchdog_pid); i++)
				sleep_ms(10);
		}
	}
	return real(fd, buf, len, flags);
}
