/*
 * meter/status.h: the one status type of the core library.
 *
 * Every fallible function of meter/ returns an enum meter_status. On anything
 * but METER_OK the outputs are left as they were (callers never see half a
 * result).
 */
#ifndef METER_STATUS_H
#define METER_STATUS_H

enum meter_status {
	METER_OK = 0,
	METER_SKIP,       /* nothing to produce (a repeated timestamp, no close interval) */
	METER_EINVAL,     /* malformed input: not a number, wrong shape */
	METER_ERANGE,     /* a value outside its allowed bounds */
	METER_EPRECISION, /* more decimal places than the quantity keeps */
	METER_EOVERFLOW,  /* a result that does not fit its integer */
	METER_EORDER,     /* samples out of order */
	METER_ENOPLAN,    /* no price plan in force at that time */
};

/* A short lowercase phrase for messages ("value out of range"). Never NULL. */
const char *meter_strerror(enum meter_status st);

#endif
