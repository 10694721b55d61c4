/*-------------------------------------------------------------------------
 *
 * table.h
 *		Private to rows.c, ending.c, session_row.c and table.c: direct heap
 *		access to the tables of dlock (table.c), shared by the files that
 *		read and write the holdings' rows (rows.c, ending.c) and a
 *		session's (session_row.c).
 *
 * The functions declared here keep short names (the lease functions of
 * rows.c use them on every line) and are hidden from the server's symbol
 * table, so no other library's or the server's function of the same name
 * can stand in for them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_TABLE_H
#define DLOCK_TABLE_H

#include "dlock.h"

#include "access/htup.h"
#include "nodes/execnodes.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

/* The most columns a TableInfo names (leases: 12). */
#define MAX_COLS 16

/*
 * Columns (dropped ones included) a row image holds without allocating;
 * ours have 11, a superuser may add more.
 */
#define MAX_ATTS 64

/*
 * A table of ours as this backend last looked it up: name, the columns
 * dlock reads or writes (cols[nrequired..ncols-1] may be absent, as 0.1's
 * scratch column), and what open_table found.
 */
typedef struct TableInfo
{
	const char *name;
	const char *const *cols;
	int			ncols;
	int			nrequired;
	bool		valid;			/* looked up since the last invalidation */
	bool		listed;			/* on table.c's invalidation list */
	Oid			relid;			/* InvalidOid: not there (older SQL) */
	Oid			pkey;
	AttrNumber	att[MAX_COLS];	/* InvalidAttrNumber: no such column */
	struct TableInfo *next;		/* table.c's invalidation list */
} TableInfo;

/*
 * A row read for change: the tuple (with its TID) and its columns, in the
 * buffers of the image itself, or allocated when the table has more than
 * MAX_ATTS columns.  Never copied (it points into itself).
 */
typedef struct RowImage
{
	HeapTuple	tup;			/* NULL: no row */
	Datum	   *values;
	bool	   *nulls;
	bool	   *replace;
	Datum		values_buf[MAX_ATTS];
	bool		nulls_buf[MAX_ATTS];
	bool		replace_buf[MAX_ATTS];
} RowImage;

#define COL(t, img, c)		((img)->values[(t)->att[c] - 1])
#define ISNULL(t, img, c)	((img)->nulls[(t)->att[c] - 1])

/* The columns of dlock.leases that rows.c and ending.c read or write. */
typedef enum LeaseCol
{
	L_RESOURCE,
	L_HOLDER,
	L_OWNER,
	L_COUNT,
	L_FENCE,
	L_LEASE,
	L_ACQUIRED_AT,
	L_RENEWED_AT,
	L_EXPIRES_AT,
	L_RELEASED_AT,
	L_TOOK_OVER,				/* 0.1's scratch column; may be absent */
	L_SESSION,					/* the holding's session (1.1); may be absent */
	L_NUM
} LeaseCol;

#pragma GCC visibility push(hidden)
extern Relation open_table(TableInfo *t, LOCKMODE mode);
extern void image_init(RowImage *img, int natts);
extern bool fetch_row(Relation rel, TableInfo *t, int nkeys, ScanKey keys,
					  const ItemPointerData *seen, RowImage *img);
extern bool fetch_row_at(Relation rel, TableInfo *t, int c, int64 key,
						 ItemPointer hint, Buffer *recent, RowImage *img);
extern bool store_tuple(Relation rel, ItemPointer otid, HeapTuple tup);
extern bool write_row(Relation rel, RowImage *img);
extern void image_new(Relation rel, RowImage *img);
extern void insert_row(Relation rel, RowImage *img);
extern bool text_eq(text *a, text *b);

/* rows.c, for ending.c: dlock.leases and dlock.delays; the setters. */
extern void set_col(TableInfo *t, RowImage *img, int c, Datum v);
extern void set_null(TableInfo *t, RowImage *img, int c);
extern TableInfo leases;
extern TableInfo delays;
extern Relation open_leases(LOCKMODE mode);
extern bool fetch_resource(Relation rel, TableInfo *t,
						   const DlockResource *res, const DlockRow *seen,
						   RowImage *img);
extern void change_row(Relation rel, const DlockResource *res, RowImage *img);
#pragma GCC visibility pop

#endif							/* DLOCK_TABLE_H */
