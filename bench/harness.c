/*
 * harness.c: the timed multi-client loop shared by the throughput
 * measurements.  Each client is a thread with its own connection; all are
 * set up (connected, statements prepared) before the clock starts, then
 * run their operation in a loop through a warm-up and a timed window.  An
 * operation counts when it completes inside the window; its latency is
 * recorded.  After the window the clients finish the operation in hand,
 * tear down and are joined.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum
{
	PHASE_WARMUP,
	PHASE_MEASURE,
	PHASE_STOP
};

static atomic_int phase;
static pthread_barrier_t ready;

typedef struct ThreadArg
{
	const RunSpec *spec;
	Client	   *client;
} ThreadArg;

/* harness_measuring: is the timed window open? */
bool
harness_measuring(void)
{
	return atomic_load(&phase) == PHASE_MEASURE;
}

/* harness_stopping: has the timed window closed? */
bool
harness_stopping(void)
{
	return atomic_load(&phase) == PHASE_STOP;
}

/* client_main: one client thread: set up, loop, tear down. */
static void *
client_main(void *p)
{
	ThreadArg  *ta = p;
	const RunSpec *spec = ta->spec;
	Client	   *c = ta->client;

	spec->setup(c);
	pthread_barrier_wait(&ready);
	while (!harness_stopping())
	{
		double		t0 = now_s();

		c->measuring = harness_measuring();
		spec->op(c);
		c->all_ops++;
		if (harness_measuring())
		{
			c->ops++;
			samples_add(&c->lat, (now_s() - t0) * 1e6);
		}
	}
	if (spec->teardown)
		spec->teardown(c);
	return NULL;
}

/* harness_run: run spec and collect the figures into res. */
void
harness_run(const RunSpec *spec, RunResult *res)
{
	pthread_t  *threads = calloc(spec->nclients, sizeof(pthread_t));
	ThreadArg  *args = calloc(spec->nclients, sizeof(ThreadArg));
	Client	   *clients = calloc(spec->nclients, sizeof(Client));
	double		t_start,
				t_end;
	int			i;

	if (threads == NULL || args == NULL || clients == NULL)
		die("out of memory");
	memset(res, 0, sizeof(*res));
	atomic_store(&phase, PHASE_WARMUP);
	pthread_barrier_init(&ready, NULL, spec->nclients + 1);
	for (i = 0; i < spec->nclients; i++)
	{
		clients[i].id = i;
		clients[i].nclients = spec->nclients;
		clients[i].arg = spec->arg;
		clients[i].fd = -1;
		args[i].spec = spec;
		args[i].client = &clients[i];
		if (pthread_create(&threads[i], NULL, client_main, &args[i]) != 0)
			die("pthread_create failed");
	}
	pthread_barrier_wait(&ready);
	sleep_s(spec->warmup_s);
	t_start = now_s();
	atomic_store(&phase, PHASE_MEASURE);
	sleep_s(spec->measure_s);
	atomic_store(&phase, PHASE_STOP);
	t_end = now_s();
	for (i = 0; i < spec->nclients; i++)
		pthread_join(threads[i], NULL);
	pthread_barrier_destroy(&ready);

	res->seconds = t_end - t_start;
	for (i = 0; i < spec->nclients; i++)
	{
		res->ops += clients[i].ops;
		res->all_ops += clients[i].all_ops;
		if (clients[i].ops > res->max_ops)
			res->max_ops = clients[i].ops;
		samples_merge(&res->lat, &clients[i].lat);
		samples_merge(&res->wait, &clients[i].wait);
	}
	res->rate = res->ops / res->seconds;
	res->clients = clients;
	res->nclients = spec->nclients;
	free(threads);
	free(args);
}

/* run_free: release what harness_run allocated. */
void
run_free(RunResult *res)
{
	int			i;

	for (i = 0; i < res->nclients; i++)
	{
		samples_free(&res->clients[i].lat);
		samples_free(&res->clients[i].wait);
		free(res->clients[i].priv);
	}
	free(res->clients);
	samples_free(&res->lat);
	samples_free(&res->wait);
}
