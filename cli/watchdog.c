/*
 * watchdog.c - the process between "dlock run" and COMMAND that keeps
 * COMMAND's whole process tree inside the lease.
 *
 *   dlock run (the client) --socketpair-- watchdog --vfork/exec-- COMMAND
 *
 * The client forks the watchdog (the same binary, no exec) before it waits
 * for the lock (watchdog_spawn), off the path to COMMAND; it starts nothing
 * until the client's WD_GO says the acquisition committed (and exits
 * quietly if the client goes away first).  It then vforks COMMAND into
 * its own process group and only supervises.  It never talks to the
 * database.  It knows the lease's deadline on CLOCK_BOOTTIME (when the
 * last acknowledged renewal was sent, plus the lease, minus a margin),
 * which the client sends after each acknowledged renewal.  It stops the tree
 * (SIGTERM and SIGCONT, then SIGKILL after --grace) when:
 *   - its deadline passes without a newer one: this holds even when the
 *     client is stopped (SIGSTOP), swapped out or stuck, since the
 *     watchdog is a separate process with its own timer;
 *   - the client dies, even by SIGKILL: the socket reaches EOF, and
 *     PR_SET_PDEATHSIG sends the watchdog SIGUSR1;
 *   - the client says the lease is lost;
 *   - COMMAND itself exited but left processes behind: they are stopped
 *     before the client releases the lock.
 * "The tree" is COMMAND's process group plus every process whose chain of
 * parents leads to the watchdog (read from /proc).  The watchdog is a child
 * subreaper (PR_SET_CHILD_SUBREAPER), so processes that daemonize (double
 * fork, setsid) are re-parented to it rather than to init and stay in
 * reach.  When no child is left it reports COMMAND's wait status to the
 * client and exits; the client releases the lock only after that.
 *
 * Signals meant for the client (SIGINT, SIGTERM, SIGHUP, SIGQUIT, the
 * job-control stops from a terminal) are blocked in the watchdog: the
 * client forwards what COMMAND should get, and a watchdog stopped or
 * killed along with the client's process group would let COMMAND run on.
 *
 * What escapes: a process that leaves through another supervisor (systemd-run,
 * a nearer subreaper), and anything if the watchdog itself is SIGKILLed or
 * SIGSTOPped (COMMAND still gets SIGKILL from its PR_SET_PDEATHSIG then).
 */
#include "dlock.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SWEEP_MS 20				/* SIGKILL sweeps until the tree is empty */

/*
 * watchdog_margin: how much earlier than the client's own lease deadline
 * the watchdog stops COMMAND: a twentieth of the lease, at most 500 ms.
 * It covers the time the kill takes to land and clock-rate differences
 * between this host and the server.
 */
int64_t
watchdog_margin(int64_t lease_ms)
{
	return lease_ms / 20 < 500 ? lease_ms / 20 : 500;
}

/* watchdog_send: one message, never blocking, never raising SIGPIPE. */
bool
watchdog_send(int fd, int type, int arg, int64_t value)
{
	WdMsg		m;

	if (fd < 0)
		return false;
	memset(&m, 0, sizeof(m));
	m.type = type;
	m.arg = arg;
	m.value = value;
	return send(fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t) sizeof(m);
}

/*
 * watchdog_recv: read one message if one is there.  Returns 1 with *m
 * filled, 0 if nothing is waiting, -1 at EOF (the peer is gone).
 *
 * past_reset (the client's side): a watchdog that exits with a deadline
 * of ours unread leaves ECONNRESET on our end, and Linux reports it once,
 * before the messages the watchdog sent first (its WD_EXITED with
 * COMMAND's status).  Read on: the messages, then EOF, follow.  The
 * watchdog's own side keeps taking the error for EOF (its client is gone
 * either way, and what it sent last is moot).
 */
int
watchdog_recv(int fd, WdMsg *m, bool past_reset)
{
	ssize_t		n;

	do
		n = recv(fd, m, sizeof(*m), MSG_DONTWAIT);
	while (n < 0 && (errno == EINTR || (past_reset && errno == ECONNRESET)));
	if (n == (ssize_t) sizeof(*m))
		return 1;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n > 0)
		return 0;				/* a short message cannot happen: ignore it */
	return -1;
}

/* The watchdog's state. */
typedef struct Wd
{
	const Options *opt;
	int			fd;				/* socket to the client; -1 after EOF */
	pid_t		client;			/* the client's pid */
	pid_t		command;		/* COMMAND's pid (and process group) */
	bool		reaped;			/* COMMAND has been waited for */
	int			status;			/* its wait status */
	int64_t		deadline;		/* stop COMMAND at this CLOCK_BOOTTIME ms */
	bool		stopping;		/* SIGTERM sent to the whole tree */
	int64_t		kill_at;		/* SIGKILL the whole tree from then on */
	bool		killed;			/* said so */
} Wd;

/* A process seen in /proc: its pid and its parent's. */
typedef struct
{
	pid_t		pid;
	pid_t		ppid;
} ProcEntry;

/* read_ppid: the parent of pid from /proc/PID/stat, or -1. */
static pid_t
read_ppid(const char *pid)
{
	char		path[64], buf[512];
	int			fd;
	ssize_t		n;
	char	   *p;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "pid (comm) state ppid ...": comm may hold anything, even ')' */
	p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ' || p[2] == '\0' || p[3] != ' ')
		return -1;
	return (pid_t) strtol(p + 4, NULL, 10);
}

/*
 * signal_descendants: send sig to every process below us, except those in
 * process group skip (which the caller signalled as a group: a process
 * must not get the same SIGTERM twice, many take a second one to mean
 * "quit now, skip the clean shutdown"); skip -1 skips none.  /proc is read
 * once into a table, then the descendants are found by following parent
 * links down from our pid.  A process forked after the scan is missed by
 * this sweep; when its parent dies it becomes our child and the next
 * sweep finds it.  Returns how many processes were signalled.
 */
static int
signal_descendants(int sig, pid_t skip)
{
	DIR		   *d = opendir("/proc");
	struct dirent *e;
	ProcEntry  *tab = NULL;
	size_t		n = 0, cap = 0;
	pid_t	   *queue;
	size_t		head = 0, tail = 0;
	int			count = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
	{
		pid_t		ppid;

		if (!isdigit((unsigned char) e->d_name[0]))
			continue;
		ppid = read_ppid(e->d_name);
		if (ppid <= 0)
			continue;
		if (n == cap)
		{
			ProcEntry  *t = realloc(tab, (cap ? cap * 2 : 256) * sizeof(*tab));

			if (t == NULL)
				break;
			tab = t;
			cap = cap ? cap * 2 : 256;
		}
		tab[n].pid = (pid_t) strtol(e->d_name, NULL, 10);
		tab[n].ppid = ppid;
		n++;
	}
	closedir(d);
	queue = malloc((n + 1) * sizeof(*queue));
	if (queue == NULL)
	{
		free(tab);
		return 0;
	}
	queue[tail++] = getpid();
	while (head < tail)
	{
		pid_t		parent = queue[head++];

		for (size_t i = 0; i < n; i++)
		{
			if (tab[i].ppid != parent || tab[i].pid == 0)
				continue;
			if ((skip <= 0 || getpgid(tab[i].pid) != skip) && kill(tab[i].pid, sig) == 0)
				count++;
			queue[tail++] = tab[i].pid;
			tab[i].pid = 0;		/* each process once, even if /proc lied */
		}
	}
	free(queue);
	free(tab);
	return count;
}

/*
 * signal_tree: sig to COMMAND's process group (while COMMAND is not yet
 * waited for, its pid cannot name another group) and to every descendant
 * outside that group: each process gets sig once.
 */
static int
signal_tree(Wd *w, int sig)
{
	if (!w->reaped && kill(-w->command, sig) == 0)
		return 1 + signal_descendants(sig, w->command);
	return signal_descendants(sig, -1);
}

/*
 * stop_tree: SIGTERM (and SIGCONT, so that a stopped process acts on it)
 * to the whole tree, once; SIGKILL follows after the grace period.
 */
static void
stop_tree(Wd *w)
{
	if (w->stopping)
		return;
	w->stopping = true;
	signal_tree(w, SIGTERM);
	signal_tree(w, SIGCONT);
	if (w->kill_at == NEVER)
		w->kill_at = now_ms() + w->opt->grace_ms;
}

/* client_gone: the client died: stop everything, take no more orders. */
static void
client_gone(Wd *w)
{
	if (w->fd >= 0)
	{
		close(w->fd);
		w->fd = -1;
	}
	if (!w->stopping)
		logmsg("watchdog: the client is gone; stopping COMMAND and its processes");
	stop_tree(w);
}

/* on_message: an order from the client. */
static void
on_message(Wd *w, const WdMsg *m)
{
	switch (m->type)
	{
		case WD_DEADLINE:
			if (!w->stopping && m->value > w->deadline)
				w->deadline = m->value;
			break;
		case WD_SIGNAL:
			/* forwarded like before: to the group, SIGKILL after --grace */
			if (!w->reaped && kill(-w->command, m->arg) != 0 && errno == ESRCH)
				kill(w->command, m->arg);
			if (w->kill_at == NEVER)
				w->kill_at = now_ms() + w->opt->grace_ms;
			break;
		case WD_LOST:
			stop_tree(w);
			break;
		default:
			break;
	}
}

/*
 * reap: wait for every child that has ended; true when none is left.
 */
static bool
reap(Wd *w)
{
	for (;;)
	{
		int			st;
		pid_t		p = waitpid(-1, &st, WNOHANG);

		if (p > 0)
		{
			if (p == w->command)
			{
				w->reaped = true;
				w->status = st;
			}
			continue;
		}
		if (p < 0 && errno == EINTR)
			continue;
		return p < 0 && errno == ECHILD;
	}
}

/*
 * supervise: the watchdog's loop; never returns.
 */
static void
supervise(Wd *w, int sigfd)
{
	for (;;)
	{
		int64_t		now = now_ms();
		int64_t		wake;
		struct pollfd pfd[2];
		int			n = 0;
		bool		none_left = reap(w);

		if (w->reaped && none_left)
		{
			watchdog_send(w->fd, WD_EXITED, 0, w->status);
			_exit(0);
		}

		/* The clock first, as in the client. */
		if (!w->stopping && now >= w->deadline)
		{
			logmsg("watchdog: the lease deadline passed without a renewal; "
				   "stopping COMMAND and its processes");
			watchdog_send(w->fd, WD_EXPIRED, 0, 0);
			stop_tree(w);
		}
		if (w->reaped && !w->stopping)
		{
			vlog(w->opt, "COMMAND exited; stopping the processes it left behind");
			stop_tree(w);
		}
		if (now >= w->kill_at && signal_tree(w, SIGKILL) > 0 && !w->killed)
		{
			w->killed = true;
			logmsg("COMMAND's processes did not exit within the grace period: SIGKILL");
		}

		wake = w->stopping ? NEVER : w->deadline;
		if (w->kill_at != NEVER)
			wake = now >= w->kill_at ? now + SWEEP_MS
				: (w->kill_at < wake ? w->kill_at : wake);
		pfd[n].fd = sigfd;
		pfd[n].events = POLLIN;
		pfd[n++].revents = 0;
		if (w->fd >= 0)
		{
			pfd[n].fd = w->fd;
			pfd[n].events = POLLIN;
			pfd[n++].revents = 0;
		}
		now = now_ms();
		if (poll(pfd, n, wake == NEVER ? 1000
				 : (int) (wake > now ? (wake - now < 1000000 ? wake - now : 1000000) : 0)) <= 0)
			continue;
		if (pfd[0].revents)
		{
			struct signalfd_siginfo si;

			while (read(sigfd, &si, sizeof(si)) == (ssize_t) sizeof(si))
			{
				if (si.ssi_signo == SIGUSR1 && getppid() != w->client)
					client_gone(w);
			}
		}
		if (n > 1 && pfd[1].revents)
		{
			WdMsg		m;
			int			r;

			while ((r = watchdog_recv(w->fd, &m, false)) == 1)
				on_message(w, &m);
			if (r < 0)
				client_gone(w);
		}
	}
}

/*
 * command_env: in the watchdog, before COMMAND is forked: DLOCK_RESOURCE,
 * DLOCK_HOLDER, DLOCK_FENCE (and for an election DLOCK_ELECTION,
 * DLOCK_TERM, DLOCK_VALUE), set in the watchdog's own environment, which
 * COMMAND inherits (the watchdog itself never reads it).
 */
static bool
command_env(const Lock *lk)
{
	if (setenv("DLOCK_RESOURCE", lk->resource, 1) != 0 ||
		setenv("DLOCK_HOLDER", lk->holder, 1) != 0 ||
		setenv("DLOCK_FENCE", lk->fence, 1) != 0)
		return false;
	if (lk->election &&
		(setenv("DLOCK_ELECTION", lk->resource, 1) != 0 ||
		 setenv("DLOCK_TERM", lk->fence, 1) != 0 ||
		 setenv("DLOCK_VALUE", lk->value, 1) != 0))
		return false;
	return true;
}

/*
 * run_command: in the child of the watchdog, made by vfork (it shares the
 * watchdog's memory until exec, so it only makes system calls): COMMAND
 * in its own process group, with the terminal if asked, normal signal
 * state and SIGKILL if the watchdog dies.
 */
static void
run_command(char **command, bool tty, pid_t watchdog)
{
	setpgid(0, 0);
	if (tty)
	{
		signal(SIGTTOU, SIG_IGN);
		tcsetpgrp(STDIN_FILENO, getpid());
	}
	signals_default_in_child();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != watchdog)
		_exit(EXIT_LEASE_LOST);
	execvp(command[0], command);
	fprintf(stderr, "%s: cannot run %s: %s\n", progname, command[0], strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/*
 * wait_go: in a watchdog spawned ahead, wait for the client's WD_GO (the
 * lock is held, its acquisition committed).  If the client goes away
 * first (EOF on the socket, or PR_SET_PDEATHSIG), nothing was started and
 * there is nothing to stop: exit quietly.
 */
static void
wait_go(int fd, int sigfd, pid_t client, WdGo *go)
{
	for (;;)
	{
		struct pollfd pfd[2] = {{sigfd, POLLIN, 0}, {fd, POLLIN, 0}};
		ssize_t		n;

		if (poll(pfd, 2, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (pfd[0].revents)
		{
			struct signalfd_siginfo si;

			while (read(sigfd, &si, sizeof(si)) == (ssize_t) sizeof(si))
				if (si.ssi_signo == SIGUSR1 && getppid() != client)
					_exit(0);
		}
		if (pfd[1].revents == 0)
			continue;
		memset(go, 0, sizeof(*go));
		n = recv(fd, go, sizeof(*go), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			continue;
		if (n <= 0)
			_exit(0);			/* the client is gone: it never said go */
		if (n == (ssize_t) sizeof(*go) && go->type == WD_GO)
		{
			go->fence[sizeof(go->fence) - 1] = '\0';
			return;
		}
	}
}

/*
 * watchdog_main: the watchdog process, just forked from the client (whose
 * pid is client); fd is its end of the socket.  It waits for WD_GO, then
 * starts COMMAND and supervises it.  Never returns.
 */
static void
watchdog_main(const Lock *client_lk, char **command, pid_t client, int fd)
{
	/* what the client catches or what would stop us with its group */
	int			blocked[] = {SIGCHLD, SIGUSR1, SIGINT, SIGTERM, SIGHUP, SIGQUIT,
	SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};
	sigset_t	set;
	int			sigfd;
	pid_t		me;
	Wd			w;
	WdGo		go;
	Lock		lk = *client_lk;

	sigemptyset(&set);
	for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++)
		sigaddset(&set, blocked[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signals_uninstall();		/* the client's handlers and self-pipe */
	if (lk.conn)
		close(PQsocket(lk.conn));	/* never PQfinish: that would talk */
	lk.conn = NULL;
	sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0)
	{
		logmsg("watchdog: signalfd: %s", strerror(errno));
		watchdog_send(fd, WD_FAILED, errno, 0);
		_exit(1);
	}
	if (prctl(PR_SET_PDEATHSIG, SIGUSR1) != 0 || getppid() != client)
		_exit(1);				/* the client is already gone: start nothing */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
	{
		logmsg("watchdog: PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
		watchdog_send(fd, WD_FAILED, errno, 0);
		_exit(1);
	}

	wait_go(fd, sigfd, client, &go);
	snprintf(lk.fence, sizeof(lk.fence), "%s", go.fence);
	if (!command_env(&lk))
	{
		logmsg("watchdog: setenv: %s", strerror(errno));
		watchdog_send(fd, WD_FAILED, errno, 0);
		_exit(1);
	}

	memset(&w, 0, sizeof(w));
	w.opt = lk.opt;
	w.fd = fd;
	w.client = client;
	w.deadline = go.deadline;
	w.kill_at = NEVER;
	me = getpid();
	fflush(NULL);
	w.command = vfork();
	if (w.command < 0)
	{
		logmsg("fork: %s", strerror(errno));
		watchdog_send(fd, WD_FAILED, errno, 0);
		_exit(1);
	}
	if (w.command == 0)
		run_command(command, go.tty != 0, me);
	setpgid(w.command, w.command);
	watchdog_send(fd, WD_STARTED, (int) w.command, 0);
	supervise(&w, sigfd);
}

/*
 * watchdog_spawn: fork the watchdog ahead of the acquisition, so that
 * once the lock is held starting COMMAND costs no fork of the client.
 * It starts COMMAND only when watchdog_go tells it to, and exits without
 * starting anything when the client closes *fd (its end of the socket,
 * non-blocking) or dies first.  Returns the watchdog's pid, or -1.
 */
pid_t
watchdog_spawn(const Lock *lk, char **command, int *fd)
{
	int			sv[2];
	pid_t		client = getpid();
	pid_t		pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
	{
		logmsg("socketpair: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0)
	{
		logmsg("fork: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (pid == 0)
	{
		close(sv[0]);			/* else we would never see the client's EOF */
		watchdog_main(lk, command, client, sv[1]);
	}
	close(sv[1]);
	fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	*fd = sv[0];
	return pid;
}

/*
 * watchdog_go: the lock is held (its acquisition committed): have the
 * watchdog start COMMAND with lk's fence, stopping its whole tree at
 * deadline (CLOCK_BOOTTIME ms, see now_ms) unless told a later one; tty:
 * COMMAND gets the terminal.  False if the watchdog is gone.
 */
bool
watchdog_go(int fd, const Lock *lk, bool tty, int64_t deadline)
{
	WdGo		go;

	memset(&go, 0, sizeof(go));
	go.type = WD_GO;
	go.tty = tty ? 1 : 0;
	go.deadline = deadline;
	snprintf(go.fence, sizeof(go.fence), "%s", lk->fence);
	return send(fd, &go, sizeof(go), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t) sizeof(go);
}

/*
 * watchdog_start: spawn the watchdog and have it start COMMAND at once
 * (watchdog_spawn + watchdog_go).  Returns the watchdog's pid, or -1.
 */
pid_t
watchdog_start(const Lock *lk, char **command, bool tty, int64_t deadline, int *fd)
{
	pid_t		pid = watchdog_spawn(lk, command, fd);

	if (pid < 0)
		return -1;
	if (!watchdog_go(*fd, lk, tty, deadline))
	{
		logmsg("watchdog: %s", strerror(errno));
		close(*fd);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}
