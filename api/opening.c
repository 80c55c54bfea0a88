#include "api/opening.h"

#include <stdlib.h>
#include <string.h>

#include "api/auth.h"
#include "api/reply.h"

bool req_open(struct req *r, const char *account_id, const struct in_field *fields, size_t nfields,
              struct in_value *values, unsigned flags, struct req_open *o)
{
	struct problem p;
	memset(o, 0, sizeof *o);
	if (fields && !in_query(r->args, r->nargs, fields, nfields, values, &p)) {
		reply_problem(r, &p);
		return false;
	}
	if (!req_may_see(r, account_id))
		return false;
	o->c = flags & REQ_OPEN_PRIMARY ? req_db(r) : req_read_db(r);
	/* data_as_of before what it is about: every sample that arrived before it is in
	 * what follows. */
	bool ok = o->c != NULL &&
	          (!(flags & REQ_OPEN_STATE) ||
	           account_state_load(r, o->c, account_id, false, &o->state)) &&
	          (!(flags & REQ_OPEN_ACCOUNT) || account_exists(r, o->c, account_id)) &&
	          (!(flags & REQ_OPEN_AS_OF) ||
	           data_as_of(r, o->c, account_id, o->asof, sizeof o->asof)) &&
	          (!(flags & REQ_OPEN_PLANS) || load_plans(r, o->c, &o->plans, &o->nplans));
	if (!ok)
		req_open_done(o);
	return ok;
}

void req_open_done(struct req_open *o)
{
	free(o->plans);
	o->plans = NULL;
	o->nplans = 0;
}

cJSON *req_body_fields(struct req *r, const struct in_field *f, size_t n, struct in_value *v,
                       bool optional)
{
	struct problem p;
	if (optional && r->body_len == 0) {
		for (size_t i = 0; i < n; i++)
			v[i] = (struct in_value){0};
		return cJSON_CreateObject();
	}
	cJSON *o = in_parse_object(r->body, r->body_len, &p);
	if (o && !in_fields(o, f, n, v, &p)) {
		cJSON_Delete(o);
		o = NULL;
	}
	if (o == NULL)
		reply_problem(r, &p);
	return o;
}
