# seckill: PGXS build.  The Lua scripts under lua/ are embedded into the
# library at build time (src/lua_scripts.h), so they can still be read and
# run on their own with redis-cli --eval.

MODULE_big = seckill
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))

EXTENSION = seckill
DATA = $(wildcard sql/seckill--*.sql)
REGRESS = $(filter-out seckill--%,$(basename $(notdir $(wildcard sql/*.sql))))
# The worker serves one database (seckill.database, default postgres).
REGRESS_OPTS = --inputdir=. --use-existing
# Interleavings of the SQL callers' locks: specs/*.spec, expected/*.out.
ISOLATION = $(basename $(notdir $(wildcard specs/*.spec)))
ISOLATION_OPTS = --inputdir=. --use-existing

LUA = $(wildcard lua/*.lua)
EXTRA_CLEAN = src/lua_scripts.h

PG_CFLAGS = -Wall -Wextra -Werror -Wmissing-prototypes -Wno-unused-parameter \
	-Wno-sign-compare -Wno-missing-field-initializers
SHLIB_LINK = -lhiredis

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after PGXS, which sets it too
CONTRIB_TESTDB = postgres

src/lua_scripts.h: $(LUA) lua/embed.sh
	sh lua/embed.sh $(LUA) > $@

# PGXS tracks no header dependencies: every object depends on every header
# (the bitcode for JIT inlining too), and redis.c embeds the scripts.
$(OBJS) $(OBJS:.o=.bc): $(wildcard src/*.h) src/lua_scripts.h
