#include "meter/status.h"

const char *meter_strerror(enum meter_status st)
{
	switch (st) {
	case METER_OK:
		return "success";
	case METER_SKIP:
		return "nothing to do";
	case METER_EINVAL:
		return "not a valid number";
	case METER_ERANGE:
		return "value out of range";
	case METER_EPRECISION:
		return "too many decimal places";
	case METER_EOVERFLOW:
		return "result too large";
	case METER_EORDER:
		return "samples out of order";
	case METER_ENOPLAN:
		return "no price plan in force";
	}
	return "unknown status";
}
