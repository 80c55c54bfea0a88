/*
 * common/netallow.h: which addresses a webhook may reach.
 *
 * A webhook's URL is anyone's with an admin key or an account's endpoint, and
 * meter-api sends to it from inside the platform's network: unchecked, it
 * reaches the database, the metadata service, anything on loopback. So the
 * addresses of loopback, "this network", private (RFC 1918, CGNAT),
 * link-local, unique-local, multicast and reserved ranges are refused, IPv4
 * embedded in IPv6 (::ffff:a.b.c.d, 64:ff9b::/96) as the IPv4 it holds,
 * unless a CIDR of the allow list (--webhook-allow, METER_WEBHOOK_ALLOW)
 * holds the address. It is checked on the address connected to, after DNS
 * (api/webhook.c), so no spelling of a host gets round it, and on a URL's
 * literal host when an endpoint is made (common/webhooks.c).
 */
#ifndef COMMON_NETALLOW_H
#define COMMON_NETALLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define NET_ALLOW_MAX 32

struct net_allow {
	size_t n;
	struct {
		int family; /* AF_INET or AF_INET6 */
		unsigned char addr[16];
		int bits;
	} cidr[NET_ALLOW_MAX];
};

/* "10.0.0.0/8,127.0.0.1/32,::1/128" (commas or spaces; "" for none) into a. */
bool net_allow_parse(const char *list, struct net_allow *a, char *err, size_t errlen);

/*
 * The kind of range addr (AF_INET or AF_INET6, 4 or 16 bytes) lies in when a
 * webhook may not reach it ("loopback", "private", ...), or NULL when it may:
 * outside them, or allowed by a.
 */
const char *net_forbidden(int family, const unsigned char *addr, const struct net_allow *a);

/* The same for a socket address. */
const char *net_forbidden_sa(const struct sockaddr *sa, const struct net_allow *a);

/*
 * The same for a URL's host when it is an address written out (any spelling
 * inet_aton takes: 127.1, 0x7f000001, 2130706433; or [v6]); NULL also for a
 * name, which is checked when it is connected to.
 */
const char *net_forbidden_host(const char *host, const struct net_allow *a);

#endif
