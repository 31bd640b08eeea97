# seckill: PGXS build.  The Lua scripts under lua/ are embedded into the
# library at build time (src/layout/lua_scripts.h), so they can still be read
# and run on their own with redis-cli --eval.
#
# src/ holds the module's entry (GUCs, names shared by every part) and a
# folder per side of the hand-off: backend/ (the SQL-callable functions),
# shared/ (what lives in shared memory), worker/ (the background worker),
# layout/ (seckill's keys and scripts in Redis), redis/ (the Redis client)
# and store/ (every statement against seckill's tables).

MODULE_big = seckill
SECKILL_SOURCES = $(wildcard src/*.c src/*/*.c)
SECKILL_HEADERS = $(wildcard src/*.h src/*/*.h)
OBJS = $(patsubst %.c,%.o,$(SECKILL_SOURCES))

EXTENSION = seckill
DATA = $(wildcard sql/seckill--*.sql)
REGRESS = $(filter-out seckill--%,$(basename $(notdir $(wildcard sql/*.sql))))
# The worker serves one database (seckill.database, default postgres).
REGRESS_OPTS = --inputdir=. --use-existing
# Interleavings of the SQL callers' locks: specs/*.spec, expected/*.out.
ISOLATION = $(basename $(notdir $(wildcard specs/*.spec)))
ISOLATION_OPTS = --inputdir=. --use-existing

LUA = $(wildcard lua/*.lua)
EXTRA_CLEAN = src/layout/lua_scripts.h src/build_flags

PG_CPPFLAGS = -I$(srcdir)/src
# The fault tests' crash points (seckill.crash_point), as PostgreSQL's
# injection points: only in a build made with CRASH_POINTS=1.
ifeq ($(CRASH_POINTS),1)
PG_CPPFLAGS += -DSECKILL_CRASH_POINTS
endif
PG_CFLAGS = -Wall -Wextra -Werror -Wmissing-prototypes -Wno-unused-parameter \
	-Wno-sign-compare -Wno-missing-field-initializers
SHLIB_LINK = -lhiredis -lssl -lcrypto

# No bitcode for JIT inlining: seckill's functions are C called through the
# function manager, nothing a JIT-compiled expression could inline, and
# clang doubled the build's time
override with_llvm = no

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after PGXS, which sets it too
CONTRIB_TESTDB = postgres

# An earlier version's bitcode left installed would be inlined by the JIT in
# place of this build's code
install: uninstall-bitcode
.PHONY: uninstall-bitcode
uninstall-bitcode:
	rm -rf '$(DESTDIR)$(pkglibdir)/bitcode/$(MODULE_big)' '$(DESTDIR)$(pkglibdir)/bitcode/$(MODULE_big).index.bc'

src/layout/lua_scripts.h: $(LUA) lua/embed.sh
	sh lua/embed.sh $(LUA) > $@

# PGXS tracks no header dependencies: every object depends on every header,
# and layout/scripts.c embeds the scripts.
$(OBJS): $(SECKILL_HEADERS) src/layout/lua_scripts.h src/build_flags

# A change of the flags (CRASH_POINTS) rebuilds every object.
src/build_flags: FORCE
	@echo '$(PG_CPPFLAGS)' | cmp -s - $@ || echo '$(PG_CPPFLAGS)' > $@

.PHONY: FORCE

# Every source file, and every header alone, compiled with the build's own
# flags (-Werror) against the server headers of includedir_server; the suite
# runs it against the oldest PostgreSQL 15 minor Debian 12 has
# (test/t/02_headers.t): make check-headers includedir_server=DIR
check-headers: src/layout/lua_scripts.h
	@set -e; for f in $(SECKILL_SOURCES); do \
		$(CC) $(CFLAGS) $(CPPFLAGS) -fsyntax-only $$f; \
	done; \
	for h in $(SECKILL_HEADERS); do \
		printf '#include "postgres.h"\n#include "%s"\n' "$${h#src/}" | \
			$(CC) $(CFLAGS) $(CPPFLAGS) -fsyntax-only -x c - || { echo "$$h does not compile alone" >&2; exit 1; }; \
	done

.PHONY: check-headers
