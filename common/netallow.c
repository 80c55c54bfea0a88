#include "common/netallow.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first bits of a and b agree. */
static bool prefix(const unsigned char *a, const unsigned char *b, int bits)
{
	int whole = bits / 8, rest = bits % 8;
	if (memcmp(a, b, (size_t)whole) != 0)
		return false;
	if (rest == 0)
		return true;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));
	return (a[whole] & mask) == (b[whole] & mask);
}

struct range {
	unsigned char addr[16];
	int bits;
	const char *kind;
};

static const struct range v4[] = {
        {{0}, 8, "\"this network\""},
        {{10}, 8, "private"},
        {{100, 64}, 10, "shared (CGNAT)"},
        {{127}, 8, "loopback"},
        {{169, 254}, 16, "link-local"},
        {{172, 16}, 12, "private"},
        {{192, 0, 0}, 24, "reserved"},
        {{192, 168}, 16, "private"},
        {{198, 18}, 15, "benchmarking"},
        {{224}, 4, "multicast"},
        {{240}, 4, "reserved"},
};

static const struct range v6[] = {
        {{0}, 128, "unspecified"},
        {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "loopback"},
        {{0xfc}, 7, "unique-local"},
        {{0xfe, 0x80}, 10, "link-local"},
        {{0xfe, 0xc0}, 10, "site-local"},
        {{0xff}, 8, "multicast"},
};

static bool allowed(int family, const unsigned char *addr, const struct net_allow *a)
{
	for (size_t i = 0; a && i < a->n; i++)
		if (a->cidr[i].family == family && prefix(addr, a->cidr[i].addr, a->cidr[i].bits))
			return true;
	return false;
}

const char *net_forbidden(int family, const unsigned char *addr, const struct net_allow *a)
{
	if (allowed(family, addr, a))
		return NULL;
	if (family == AF_INET6) {
		static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
		if (memcmp(addr, mapped, 12) == 0 || memcmp(addr, nat64, 12) == 0)
			return net_forbidden(AF_INET, addr + 12, a);
		for (size_t i = 0; i < sizeof v6 / sizeof v6[0]; i++)
			if (prefix(addr, v6[i].addr, v6[i].bits))
				return v6[i].kind;
		return NULL;
	}
	if (family != AF_INET)
		return "unknown";
	for (size_t i = 0; i < sizeof v4 / sizeof v4[0]; i++)
		if (prefix(addr, v4[i].addr, v4[i].bits))
			return v4[i].kind;
	return NULL;
}

const char *net_forbidden_sa(const struct sockaddr *sa, const struct net_allow *a)
{
	if (sa->sa_family == AF_INET)
		return net_forbidden(
		        AF_INET,
		        (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)
		                ->sin_addr,
		        a);
	if (sa->sa_family == AF_INET6)
		return net_forbidden(
		        AF_INET6,
		        ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr, a);
	return "unknown";
}

const char *net_forbidden_host(const char *host, const struct net_allow *a)
{
	char h[256];
	size_t n = strlen(host);
	if (n == 0 || n >= sizeof h)
		return NULL;
	if (host[0] == '[' && host[n - 1] == ']') {
		memcpy(h, host + 1, n - 2);
		h[n - 2] = '\0';
		char *zone = strchr(h, '%');
		if (zone)
			*zone = '\0';
		struct in6_addr a6;
		return inet_pton(AF_INET6, h, &a6) == 1 ? net_forbidden(AF_INET6, a6.s6_addr, a)
		                                        : NULL;
	}
	struct in_addr a4;
	if (inet_aton(host, &a4) == 1)
		return net_forbidden(AF_INET, (const unsigned char *)&a4, a);
	return NULL;
}

bool net_allow_parse(const char *list, struct net_allow *a, char *err, size_t errlen)
{
	memset(a, 0, sizeof *a);
	const char *p = list ? list : "";
	while (*p) {
		size_t len = strcspn(p, ", ");
		if (len == 0) {
			p++;
			continue;
		}
		char one[80], *slash;
		if (len >= sizeof one || a->n == NET_ALLOW_MAX) {
			snprintf(err, errlen, "--webhook-allow: %s",
			         len >= sizeof one ? "a CIDR is too long" : "more than 32 CIDRs");
			return false;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		p += len;
		slash = strchr(one, '/');
		int bits = -1;
		if (slash) {
			char *end;
			*slash = '\0';
			long b = strtol(slash + 1, &end, 10);
			bits = *end == '\0' && slash[1] ? (int)b : -2;
		}
		int family = strchr(one, ':') ? AF_INET6 : AF_INET;
		int most = family == AF_INET6 ? 128 : 32;
		if (bits == -1)
			bits = most;
		if (inet_pton(family, one, a->cidr[a->n].addr) != 1 || bits < 0 || bits > most) {
			snprintf(err, errlen,
			         "--webhook-allow: \"%s%s%s\" is not a CIDR (such as 10.0.0.0/8 or "
			         "fd00::/8)",
			         one, slash ? "/" : "", slash ? slash + 1 : "");
			return false;
		}
		a->cidr[a->n].family = family;
		a->cidr[a->n].bits = bits;
		a->n++;
	}
	return true;
}
