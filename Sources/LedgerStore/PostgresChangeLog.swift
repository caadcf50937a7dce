import LedgerCore

/// What lets a PostgreSQL write group read before it takes the head's lock (docs/scale-out.md,
/// "Reading outside the lock"): a write generation in the head row, bumped by every write group's
/// lock, and one `ledger_changes` row per committed write group: its generation, the log's head
/// sequence when it locked and when it committed, and the keys it wrote as 8-byte fingerprints.
///
/// A group reads its commands, vault keys and lineage states in one `REPEATABLE READ` snapshot
/// with the head's generation G, outside the lock; then, under the lock (its generation H), it
/// reads the rows after G. Every group committed after the snapshot holds one of the generations
/// G+1…H-1 (the lock serialises the bumps, and a rolled-back group gives its generation back), so
/// when those rows are all there, a key none of them names reads now as it did in the snapshot;
/// the keys they name are read again under the lock. The group trusts none of its snapshot, and
/// reads everything again under the lock, when a row is missing (pruned: only the last ``kept``
/// stay), when a row has no keys ("every key": a group that wrote more than ``keyLimit``), or when
/// the rows' head sequences do not chain from the snapshot's to the locked one (records appended by
/// a writer that keeps no such rows: an older build).
///
/// Fingerprints are hashes of the keyed HMACs (command keys, vault keys) and of read-model keys:
/// no UID or Apple identifier. Two keys sharing a fingerprint only cost a needless re-read.
enum ChangeLog {
    /// `ledger_changes` rows kept: older ones are deleted by the group that commits generation + ``kept``.
    static let kept: Int64 = 256
    /// Whether the store has `ledger_changes`, the guard function and its trigger on every guarded
    /// table (then ``schema`` and ``guardSchema`` were installed), and whether that function is the
    /// one ``guardFunctionBody`` describes: one row, two booleans. Reads the catalogs only: any role
    /// that can write can ask.
    static let installedStatement = PostgresStatement(
        """
        SELECT to_regclass('ledger_changes') IS NOT NULL AND to_regprocedure('ledger_require_generation()') IS NOT NULL
                AND (SELECT count(*) FROM pg_trigger WHERE tgname = 'ledger_require_generation' AND NOT tgisinternal
                     AND tgrelid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest($1::text[]) AS t))) = $2
                AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('ledger_sealed_uids') AND attname = 'bound' AND NOT attisdropped),
            EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('ledger_require_generation()') AND prosrc = $3)
        """, [.textArray(guardedTables), .int64(Int64(guardedTables.count)), .text(guardFunctionBody)])

    /// Past this many keys, a group's row says "every key" (a migration's or a rebuild's batches).
    static let keyLimit = 8_192

    /// The schema a store without it gets from its first writer (``PostgresEngine``), and `init` at once.
    static let schema = [
        "ALTER TABLE ledger_head ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0",
        // The transaction that bumped the generation last (``lockStatement``), for ``guardSchema``.
        "ALTER TABLE ledger_head ADD COLUMN IF NOT EXISTS writer bigint NOT NULL DEFAULT 0",
        """
        CREATE TABLE IF NOT EXISTS ledger_changes (
            generation bigint PRIMARY KEY, from_sequence bigint NOT NULL, sequence bigint NOT NULL, keys bytea)
        """,
        // Fingerprints do not compress: do not try.
        "ALTER TABLE ledger_changes ALTER COLUMN keys SET STORAGE EXTERNAL",
        // Which sealed UIDs are bound to their pseudonym (``SealedUID``): false for those written before.
        "ALTER TABLE ledger_sealed_uids ADD COLUMN IF NOT EXISTS bound boolean NOT NULL DEFAULT false",
    ]

    /// Whether `ledger_sealed_uids` has its `bound` column (a store no writer of session 28 or later
    /// has opened yet has not: every sealed UID in it is legacy).
    static let boundColumnStatement = PostgresStatement(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('ledger_sealed_uids') AND attname = 'bound' AND NOT attisdropped)"
    )

    /// The tables a write group writes besides the head and `ledger_changes`.
    static let guardedTables = [
        "ledger_log", "ledger_commands", "ledger_lineages", "ledger_account_lineages", "ledger_merkle", "ledger_read_models",
        "ledger_identities", "ledger_sealed_uids", "ledger_meta",
    ]

    /// Refuses, in the server, any write to the ledger's data in a transaction that did not take the
    /// head's lock through ``lockStatement``: a build older than the change log locks the head with
    /// `SELECT … FOR UPDATE`, bumps no generation and leaves no row, and builds that keep
    /// `ledger_changes` but predate this guard bump the generation without naming themselves in
    /// `writer`; either way a group's snapshot could not rely on what they wrote (a repair's read
    /// models, say). Such a writer now fails naming the cause instead. Statement-level: one lookup of
    /// the head row per statement, not per row. Installed after ``schema`` (by `init` once its
    /// metadata is written).
    ///
    /// The transaction must have written the head row itself (its `xmin`, the low 32 bits of its
    /// transaction id) as well as named itself in `writer`: after a logical dump restored into
    /// another cluster, `writer` holds a transaction id of the source cluster, which a transaction of
    /// the new one may get, but the restored row's `xmin` is the restoring transaction's, which no
    /// later transaction has.
    static let guardFunctionBody = """

        BEGIN
            IF NOT EXISTS (
                SELECT 1 FROM ledger_head WHERE writer = txid_current() AND xmin::text::bigint = txid_current() % 4294967296
            ) THEN
                RAISE EXCEPTION 'ledger: % written by a transaction that did not take the head''s write generation: a ledger build older than this store''s guard is writing to it (one without the change log, ledger_changes, or one with it that does not set ledger_head.writer), or a transaction outside the ledger; upgrade every writer', TG_TABLE_NAME
                    USING ERRCODE = '55000';
            END IF;
            RETURN NULL;
        END

        """

    static let guardFunction =
        "CREATE OR REPLACE FUNCTION ledger_require_generation() RETURNS trigger LANGUAGE plpgsql AS $$\(guardFunctionBody)$$"

    static let guardSchema =
        [guardFunction]
        + guardedTables.flatMap { table in
            [
                "DROP TRIGGER IF EXISTS ledger_require_generation ON \(table)",
                """
                CREATE TRIGGER ledger_require_generation BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON \(table)
                    FOR EACH STATEMENT EXECUTE FUNCTION ledger_require_generation()
                """,
            ]
        }

    /// The head's lock: the row locked by bumping its generation (and naming this transaction as
    /// its writer, for ``guardSchema``); answers the head and the new generation.
    static let lockStatement = PostgresStatement(
        "UPDATE ledger_head SET generation = generation + 1, writer = txid_current() "
            + "RETURNING sequence, chain_hash, recorded_at, frontier, generation")

    /// The snapshot's generation and head sequence.
    static let generationStatement = PostgresStatement("SELECT generation, sequence FROM ledger_head")

    static func changesStatement(after generation: Int64) -> PostgresStatement {
        PostgresStatement(
            "SELECT generation, from_sequence, sequence, keys FROM ledger_changes WHERE generation > $1 ORDER BY generation", [.int64(generation)])
    }

    /// The committing group's row (at the generation its lock set; `from` the head sequence it
    /// locked, the committed one read from the head), and the pruning of rows older than the last `kept`.
    static func recordStatement(_ fingerprints: [UInt64]?, from: UInt64, kept: Int64 = kept) -> PostgresStatement {
        let prune = "WITH pruned AS (DELETE FROM ledger_changes WHERE generation <= (SELECT generation FROM ledger_head) - \(kept)) "
        let insert = "INSERT INTO ledger_changes SELECT generation, $1, sequence, "
        guard let fingerprints else { return PostgresStatement(prune + insert + "NULL FROM ledger_head", [.int64(Int64(from))]) }
        var keys: [UInt8] = []
        keys.reserveCapacity(fingerprints.count * 8)
        for fingerprint in fingerprints { PostgresValue.append(fingerprint, to: &keys) }
        return PostgresStatement(prune + insert + "$2 FROM ledger_head", [.int64(Int64(from)), .bytes(keys)])
    }

    /// The fingerprints named by the rows of ``changesStatement(after:)``, when they are exactly the
    /// generations after the snapshot's and before the locked one, each with its keys, their head
    /// sequences chaining from the snapshot's to the locked one; nil otherwise (every key is to be
    /// read again).
    static func changedKeys(
        _ rows: PostgresRows, snapshot: (generation: Int64, sequence: Int64), locked: (generation: Int64, sequence: Int64)
    ) throws -> [UInt64]? {
        guard snapshot.generation < locked.generation, Int64(rows.count) == locked.generation - snapshot.generation - 1 else { return nil }
        var keys: [UInt64] = []
        var sequence = snapshot.sequence
        for row in 0..<rows.count {
            guard try PostgresRowDecoding.int64(rows.value(row, 0)) == snapshot.generation + 1 + Int64(row),
                try PostgresRowDecoding.int64(rows.value(row, 1)) == sequence, let bytes = rows.value(row, 3), bytes.count % 8 == 0
            else { return nil }
            sequence = try PostgresRowDecoding.int64(rows.value(row, 2))
            keys.reserveCapacity(keys.count + bytes.count / 8)
            for offset in stride(from: 0, to: bytes.count, by: 8) {
                keys.append(UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            }
        }
        return sequence == locked.sequence ? keys : nil
    }

    // MARK: Fingerprints

    static func fingerprint(command key: Key128) -> UInt64 { mix(1, key) }
    static func fingerprint(vaultKey key: Key128) -> UInt64 { mix(2, key) }

    static func fingerprint(readModel key: [UInt8]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ 3  // FNV-1a
        for byte in key { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return finalize(hash)
    }

    /// The fingerprint an index entry changes: the command whose latest record it locates (others: none read ahead).
    static func fingerprint(of entry: IndexEntry) -> UInt64? {
        switch entry {
        case .command(let command, _), .lineage(_, _, let command): fingerprint(command: command)
        case .accountLineage, .merkleNode, .malformed: nil
        }
    }

    private static func mix(_ tag: UInt64, _ key: Key128) -> UInt64 {
        finalize(finalize(tag ^ key.high) ^ key.low)
    }

    /// SplitMix64's finalizer: every bit of the input moves every bit of the output.
    private static func finalize(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9e37_79b9_7f4a_7c15
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}
