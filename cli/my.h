/*
 * my.h - what the two files of the MySQL/MariaDB backend share (built
 * with DLOCK_MYSQL): my.c holds the connection and the one-shot
 * subcommands, my_lock.c takes, renews and gives back a lock, and is
 * the backend of the run supervisor (run.c).
 */
#ifndef DLOCK_MY_H
#define DLOCK_MY_H

#include "dlock.h"

/* Outcome of one statement. */
typedef enum
{
	Q_OK,						/* out/isnull hold the first column of the first row */
	Q_LOST,						/* the connection is gone */
	Q_ERROR,					/* the server refused (reported) */
} QStatus;

/* my.c */
bool		my_open(const Options *o, unsigned timeout_s, bool quiet);
void		my_close(void);
bool		my_connected(void);
bool		my_transient(void);
bool		my_open_refused(void);
const char *my_open_error(void);
bool		my_refused(void);
QStatus		my_scalar(const char *sql, int n, const char *const *vals, char *out,
					  size_t outlen, bool *isnull);
void		my_seconds(char *buf, size_t len, int64_t ms);

/* my_lock.c */
void		my_lock_init(Lock *lk, const Options *o, const char *resource);
int			my_acquire(Lock *lk, int64_t wait_ms);
extern const RunBackend my_backend;

#endif							/* DLOCK_MY_H */
