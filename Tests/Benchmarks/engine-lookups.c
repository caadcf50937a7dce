/* Tests/Benchmarks/engine-lookups.c: what a random point lookup costs LMDB itself in a ledger store's own
 * trees, with Debian's liblmdb and none of the ledger's code (docs/benchmarks.md, "Session 41").
 *
 *   cc -O2 -o engine-lookups Tests/Benchmarks/engine-lookups.c $(pkg-config --cflags --libs lmdb)
 *   engine-lookups STORE [LOOKUPS]
 *
 * Opens STORE's data.mdb read-only, and for each of the trees a submitted line reads by a random key
 * (`lineages`, `read-models`, `identities`, and `log` for a retry's earlier record) collects every key,
 * then times LOOKUPS (default 1,000,000) `mdb_get` calls of keys drawn at random. Prints the microseconds
 * per lookup with the tree's keys, leaves and depth. Figures only; `make bench-lookups` runs it on the
 * stores `make bench-tenths` leaves (the first tenth's, the first nine tenths'). */
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                         \
    do {                                                                                    \
        int rc = (call);                                                                    \
        if (rc) { fprintf(stderr, "engine-lookups: %s: %s\n", #call, mdb_strerror(rc)); exit(1); } \
    } while (0)

enum { KEY_MAX = 40 };
static unsigned long long state = 88172645463325252ull;
static unsigned long long next_random(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; }
static double seconds(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) { fprintf(stderr, "usage: engine-lookups STORE [LOOKUPS]\n"); return 2; }
    long lookups = argc == 3 ? atol(argv[2]) : 1000000;
    if (lookups <= 0) { fprintf(stderr, "engine-lookups: LOOKUPS must be a positive number, not %s\n", argv[2]); return 2; }
    MDB_env *env;
    CHECK(mdb_env_create(&env));
    CHECK(mdb_env_set_maxdbs(env, 256));
    CHECK(mdb_env_set_mapsize(env, 1ull << 36));
    CHECK(mdb_env_open(env, argv[1], MDB_RDONLY | MDB_NOTLS, 0600));
    const char *names[] = {"lineages", "read-models", "identities", "log"};
    for (int tree = 0; tree < 4; tree++) {
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_cursor *cursor;
        MDB_val key, value;
        MDB_stat stat;
        CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
        CHECK(mdb_dbi_open(txn, names[tree], 0, &dbi));
        CHECK(mdb_stat(txn, dbi, &stat));
        size_t count = 0, capacity = 1 << 16;
        unsigned char (*keys)[KEY_MAX] = malloc(capacity * KEY_MAX);
        unsigned char *lengths = malloc(capacity);
        if (!keys || !lengths) { fprintf(stderr, "engine-lookups: out of memory\n"); return 1; }
        CHECK(mdb_cursor_open(txn, dbi, &cursor));
        for (int rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT_NODUP)) {
            if (key.mv_size > KEY_MAX) continue;
            if (count == capacity) {
                capacity *= 2;
                keys = realloc(keys, capacity * KEY_MAX);
                lengths = realloc(lengths, capacity);
                if (!keys || !lengths) { fprintf(stderr, "engine-lookups: out of memory\n"); return 1; }
            }
            memcpy(keys[count], key.mv_data, key.mv_size);
            lengths[count++] = (unsigned char)key.mv_size;
        }
        mdb_cursor_close(cursor);
        if (count == 0) { printf("%-12s empty\n", names[tree]); mdb_txn_abort(txn); free(keys); free(lengths); continue; }
        unsigned long checksum = 0;
        double start = seconds();
        for (long i = 0; i < lookups; i++) {
            size_t pick = next_random() % count;
            key.mv_size = lengths[pick];
            key.mv_data = keys[pick];
            if (mdb_get(txn, dbi, &key, &value) == 0 && value.mv_size > 0) checksum += ((unsigned char *)value.mv_data)[0];
        }
        double elapsed = seconds() - start;
        printf("%-12s keys %9zu leaves %7zu depth %u: %.3f us per lookup (checksum %lu)\n", names[tree], count, (size_t)stat.ms_leaf_pages,
            stat.ms_depth, elapsed / lookups * 1e6, checksum);
        mdb_txn_abort(txn);
        free(keys);
        free(lengths);
    }
    mdb_env_close(env);
    return 0;
}
