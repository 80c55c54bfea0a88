/*
 * collector/enforce.h: enforcing accounts' limits on this host (opt-in,
 * meter-collector --enforce freeze|kill).
 *
 * After each round the collector reads, for the accounts of the sandboxes it
 * watches, whether one is over a limit: a trial account whose grant is used
 * up, or an account whose month has reached its spend cap (account_limits,
 * kept by meter-api's rollup and by PATCH /v1/accounts; migration 0027). It
 * acts on the sandboxes of those accounts on this host: freeze stops their
 * processes where they are (cgroup.freeze on v2, freezer.state on v1) and
 * thaws them when the limit lifts (a cap raised or removed, a plan made
 * paid, a new month); kill ends them (cgroup.kill on v2, else SIGKILL to each
 * process), so their cgroups empty and the sandboxes end. Each act is
 * logged with the sandbox, the account and why. A frozen sandbox is billed
 * as any idle one: its memory, and CPU at the floor (rules 4 and 5 of
 * docs/billing-rules.md).
 *
 * The sandboxes it froze are listed in a state file (beside the spool), so a
 * collector restarted while they are frozen still thaws them; it never thaws
 * a cgroup someone else froze.
 */
#ifndef COLLECTOR_ENFORCE_H
#define COLLECTOR_ENFORCE_H

#include <stdbool.h>
#include <stddef.h>

#include "collector/cgroup.h"

struct collector;

enum enforce_mode { ENFORCE_OFF, ENFORCE_FREEZE, ENFORCE_KILL };

/* "off", "freeze" or "kill"; false for anything else. */
bool enforce_mode_parse(const char *s, enum enforce_mode *mode);

/* Freezes (frozen) or thaws cgroup rel; false with err when the host cannot. */
bool enforce_freeze(const struct cg_layout *l, const char *rel, bool frozen, char *err,
                    size_t errlen);

/* Kills every process in cgroup rel; false with err when it cannot. */
bool enforce_kill(const struct cg_layout *l, const char *rel, char *err, size_t errlen);

/*
 * One pass over c's sandboxes (see above). state_path: the file listing the
 * sandboxes this collector froze ("" for none, then it is kept in memory
 * only). Failures are logged; the next pass tries again.
 */
void enforce_pass(struct collector *c, enum enforce_mode mode, const char *state_path);

#endif
