import LedgerCore
import LedgerCrypto
import LedgerStore
import Projections

/// One write group as the engine sees it: the state the group's commands read, loaded in batches
/// (``load(lineages:accounts:staff:cases:)``), then decided in memory on that state plus the group's
/// own changes (a later command sees an earlier one's records, identities and effects), then
/// written as one ``EngineBatch``.
struct WriteGroup {
    let store: LedgerStore
    let reader: any EngineReader
    /// The ledger clock (`recordedAt`).
    let clock: () -> Timestamp
    private(set) var appender: LogAppender
    /// The state loaded so far, evolved by the group's records.
    private(set) var state = LedgerState()
    private var loadedLineages = Set<LineageKey>()
    private var loadedAccounts = Set<AccountID>()
    private var loadedDeleted = Set<AccountID>()
    private var loadedStaff = false
    private var loadedCases = Set<String>()
    /// Latest record of each command looked up or appended (nil: it has none).
    private var commands: [Key128: Record?] = [:]
    /// Pseudonyms looked up, issued or erased in the group (nil: none).
    private var pseudonyms: [Key128: AccountID?] = [:]
    /// Vault entries read from the store and not yet confirmed against the UID looked up
    /// (``LedgerStore/confirm(_:uid:)``: the first lookup of the UID in the group does it).
    private var unconfirmed: [Key128: VaultEntry] = [:]
    /// The vault keys of the UIDs the group names (HMACs, computed once).
    private var vaultKeys: [String: Key128] = [:]
    private var vaultInserts: [(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])] = []
    private var vaultErasures: [(vaultKey: Key128, account: AccountID)] = []
    /// Read models the group changed (lineages: their persisted state as loaded, nil when none).
    private var changedLineages = Set<LineageKey>()
    private var persistedLineages: [LineageKey: LineageState] = [:]
    private var changedDeleted: [AccountID] = []
    private var changedStaff = Set<StaffID>()
    private var changedCases = Set<String>()
    /// Records appended to each lineage in the group (for lineage versions).
    private var appendedOnLineage: [LineageKey: UInt64] = [:]
    /// The random bytes of the pseudonyms the group issues, drawn a block at a time.
    private let random: RandomPool

    /// A write group for `size` submissions: its tables are sized for them up front (none grows and
    /// rehashes while the group is decided).
    init(store: LedgerStore, reader: any EngineReader, clock: @escaping () -> Timestamp, size: Int = 1) throws {
        self.store = store
        self.reader = reader
        self.clock = clock
        appender = try LogAppender(head: try reader.head())
        random = RandomPool(blockSize: min(4_096, LedgerStore.randomBytesPerPseudonym * max(1, size)))
        commands.reserveCapacity(size)
        pseudonyms.reserveCapacity(size)
        unconfirmed.reserveCapacity(size)
        vaultKeys.reserveCapacity(size)
        loadedLineages.reserveCapacity(size)
        changedLineages.reserveCapacity(size)
        appendedOnLineage.reserveCapacity(size)
    }

    // MARK: Loading (batch reads of what the group has not loaded yet)

    /// Loads the persisted state of `lineages`, the lineages currently bound to `accounts` (with
    /// their states), whether `deleted` accounts were deleted, the roster and `cases`.
    mutating func load(
        lineages: [LineageKey] = [], accounts: [AccountID] = [], deleted: [AccountID] = [], staff: Bool = false, cases: [String] = []
    ) throws {
        // Most lines name only what the group loaded already: nothing to read, nothing to allocate.
        if lineages.allSatisfy(loadedLineages.contains), accounts.allSatisfy(loadedAccounts.contains),
            deleted.allSatisfy(loadedDeleted.contains), !staff || loadedStaff, cases.allSatisfy(loadedCases.contains)
        {
            return
        }
        var wanted = lineages.filter { !loadedLineages.contains($0) }
        let newAccounts = accounts.filter { !loadedAccounts.contains($0) }
        var everBound: [AccountID: [LineageKey]] = [:]
        if !newAccounts.isEmpty {
            everBound = try reader.lineages(boundTo: newAccounts)
            wanted += everBound.values.joined().filter { !loadedLineages.contains($0) && !wanted.contains($0) }
        }
        if !wanted.isEmpty {
            let states = try reader.lineageStates(wanted)
            state.lineages.reserveCapacity(state.lineages.count + states.count)
            persistedLineages.reserveCapacity(persistedLineages.count + states.count)
            for lineage in wanted where !loadedLineages.contains(lineage) {
                loadedLineages.insert(lineage)
                if let persisted = states[lineage] {
                    state.lineages[lineage] = persisted
                    persistedLineages[lineage] = persisted
                }
            }
        }
        for account in newAccounts {
            loadedAccounts.insert(account)
            // Every lineage ever bound to the account, filtered by its current binding; plus those
            // the group bound to it already.
            var bound = state.accountLineages[account] ?? []
            for lineage in everBound[account] ?? [] where state.lineage(lineage).binding == .bound(account) { bound.insert(lineage) }
            state.accountLineages[account] = bound.isEmpty ? nil : bound
        }
        let newDeleted = (deleted + newAccounts).filter { !loadedDeleted.contains($0) }
        if !newDeleted.isEmpty {
            state.deletedAccounts.formUnion(try reader.deletedAccounts(among: newDeleted))
            loadedDeleted.formUnion(newDeleted)
        }
        if staff && !loadedStaff {
            state.staff = try reader.staff().merging(state.staff) { _, group in group }
            loadedStaff = true
        }
        let newCases = cases.filter { !loadedCases.contains($0) }
        if !newCases.isEmpty {
            for (id, transfer) in try reader.transferCases(newCases) where state.transfers[id] == nil { state.transfers[id] = transfer }
            loadedCases.formUnion(newCases)
        }
    }

    /// The latest record of `command`, if any (looking up several at once is ``prefetch(commands:uids:vaultKeys:)``).
    mutating func latestRecord(of command: CommandRef) throws -> Record? {
        if let known = commands[command.key] { return known }
        try prefetch(commands: [command])
        return commands[command.key] ?? nil
    }

    /// Looks up the latest records of `commands` and the pseudonyms of `uids` and of the UIDs whose
    /// `vaultKeys` are given in two batch reads.
    mutating func prefetch(commands wanted: [CommandRef] = [], uids: [String] = [], vaultKeys known: [Key128] = []) throws {
        let missing = wanted.filter { commands[$0.key] == nil }
        if !missing.isEmpty {
            let found = try reader.latestRecords(of: missing)
            for command in missing {
                commands[command.key] = try found[command.key].map { try RecordCodec.decode($0.bytes, sequence: $0.sequence) } as Record?
            }
        }
        let missingKeys = try (known + uids.map { try vaultKey(of: $0) }).filter { pseudonyms[$0] == nil }
        if !missingKeys.isEmpty {
            let found = try reader.identities(vaultKeys: missingKeys)
            for key in missingKeys {
                let entry = found[key]
                pseudonyms[key] = entry?.account as AccountID?
                if let entry { unconfirmed[key] = entry }
            }
        }
    }

    /// The vault key of `uid`: `known` when the caller has it (``Ledger/Prepared``), else computed once.
    private mutating func vaultKey(of uid: String, known: Key128? = nil) throws -> Key128 {
        if let known { return known }
        if let computed = vaultKeys[uid] { return computed }
        let key = try store.keys.vaultKey(uid: uid)
        vaultKeys[uid] = key
        return key
    }

    /// The pseudonym of the live account `uid` (whose vault key is `vaultKey`, when the caller has it), if any.
    /// Throws ``LedgerStoreError/identityVaultMismatch`` when the UID sealed under the pseudonym the
    /// store's vault entry points to is not `uid`: the group commits nothing (the committer decides
    /// its lines again one line at a time, so only those naming the UID are refused).
    mutating func pseudonym(ofUID uid: String, vaultKey known: Key128? = nil) throws -> AccountID? {
        let vaultKey = try self.vaultKey(of: uid, known: known)
        if pseudonyms[vaultKey] == nil { try prefetch(vaultKeys: [vaultKey]) }
        if let entry = unconfirmed[vaultKey] {
            _ = try store.confirm(entry, uid: uid)
            unconfirmed[vaultKey] = nil
        }
        return pseudonyms[vaultKey] ?? nil
    }

    /// The pseudonym of `uid`, issuing a new one (kept with the UID sealed) for a new account.
    mutating func pseudonym(forUID uid: String, vaultKey known: Key128? = nil) throws -> AccountID {
        let vaultKey = try self.vaultKey(of: uid, known: known)
        if let existing = try pseudonym(ofUID: uid, vaultKey: vaultKey) { return existing }
        let issued = try store.issuePseudonym(forUID: uid, position: appender.head.sequence + 1, vaultKey: vaultKey, random: random)
        vaultInserts.append((issued.vaultKey, issued.account, issued.sealedUID))
        pseudonyms[issued.vaultKey] = issued.account
        return issued.account
    }

    /// Erases `uid`'s mapping in the group (the account's deletion).
    mutating func eraseIdentity(uid: String, vaultKey known: Key128? = nil) throws {
        let vaultKey = try self.vaultKey(of: uid, known: known)
        guard let account = try pseudonym(ofUID: uid, vaultKey: vaultKey) else { return }
        vaultInserts.removeAll { $0.vaultKey == vaultKey }
        vaultErasures.append((vaultKey, account))
        pseudonyms[vaultKey] = .some(nil)
    }

    /// The UID of a live account (for display), if the vault still has it.
    func uid(of account: AccountID) throws -> String? {
        if let issued = vaultInserts.first(where: { $0.account == account }) {
            return try store.uid(sealed: issued.sealedUID, of: account)
        }
        guard !vaultErasures.contains(where: { $0.account == account }) else { return nil }
        return try store.uid(of: account, in: reader)
    }

    /// The version a transfer plan states: the number of the lineage's records that changed its
    /// binding or entitlement or requested a transfer of it (``forEachRecord(of:_:)``), plus the
    /// group's own records.
    func lineageVersion(_ lineage: LineageKey) throws -> UInt64 {
        var version = appendedOnLineage[lineage] ?? 0
        try forEachRecord(of: lineage) { _, changed in if changed { version += 1 } }
        return version
    }

    /// How many of the lineage's records after case `caseId`'s request changed it (as
    /// ``lineageVersion(_:)`` counts): the plan is fresh while none did. Judged from the request's
    /// place in the log, not from the version the plan states, so a plan stated under an earlier
    /// counting rule is judged the same way. Nil when the lineage holds no such request.
    func changes(of lineage: LineageKey, sinceRequestOf caseId: String) throws -> UInt64? {
        var requested = false
        var changes: UInt64 = 0
        try forEachRecord(of: lineage) { record, changed in
            if requested {
                if changed { changes += 1 }
            } else {
                requested = record.events.contains { event in
                    if case .transferRequested(let request) = event { request.plan.caseId == caseId } else { false }
                }
            }
        }
        return requested ? changes : nil
    }

    /// Visits the lineage's records in order, each with whether it changed the lineage: its binding
    /// or entitlement, or a transfer of it requested. Attempts that changed nothing (a denied restore,
    /// a replayed transaction, a notification recording nothing) and approvals and refusals do not
    /// count, so nobody holding a transaction can make a plan stale without changing the subscription.
    private func forEachRecord(of lineage: LineageKey, _ body: (Record, Bool) -> Void) throws {
        var state: LineageState?
        for sequence in try reader.sequences(ofLineage: lineage, through: reader.head().sequence) {
            guard let bytes = try reader.record(sequence) else { throw LedgerStoreError.corrupt("record \(sequence) is missing from the log") }
            let record = try RecordCodec.decode(bytes, sequence: sequence)
            let before = state
            var requested = false
            for event in record.events {
                if case .transferRequested(let request) = event, request.plan.lineage == lineage { requested = true }
                if StateProjection.changedLineage(event) == lineage { StateProjection.evolve(lineage: &state, event) }
            }
            body(record, requested || state != before)
        }
    }

    /// A transfer approval or refusal: on a lineage's index, but it changes nothing there.
    static func isCaseStep(_ record: Record) -> Bool {
        record.events.allSatisfy {
            switch $0 {
            case .transferApproved, .transferRefused: true
            default: false
            }
        }
    }

    // MARK: Appending

    /// Appends one record of `events` for `command` (recorded now by the ledger clock; `at` is the
    /// business time) and evolves the group's state by it.
    @discardableResult
    mutating func append(_ events: [LedgerEvent], at: Timestamp, command: Key128, attempt: UInt32) throws -> Record {
        let transfers = state.transfers
        let caseLineage = { (caseId: String) in transfers[caseId]?.request.plan.lineage }
        let record = try appender.append(recordedAt: clock(), at: at, command: command, attempt: attempt, events: events, caseLineage: caseLineage)
        if !Self.isCaseStep(record) {
            forEachImpliedEntry(sequence: record.sequence, command: command, events: events[...], caseLineage: caseLineage) { entry in
                if case .lineage(let lineage, _, _) = entry { appendedOnLineage[lineage, default: 0] += 1 }
            }
        }
        var changed: LineageKey?  // a record's events usually all name one lineage: inserted once
        for event in events {
            StateProjection.evolve(&state, event)
            if let lineage = event.lineage, lineage != changed {
                changedLineages.insert(lineage)
                changed = lineage
            }
            switch event {
            case .accountDeleted(let account): changedDeleted.append(account)
            case .staffEnrolled(let e): changedStaff.insert(e.staff)
            case .staffRemoved(let e): changedStaff.insert(e.staff)
            case .transferRequested(let e): changedCases.insert(e.plan.caseId)
            case .transferApproved(let e): changedCases.insert(e.caseId)
            case .transferApplied(let e): changedCases.insert(e.caseId)
            default: break
            }
        }
        commands[command] = record
        return record
    }

    /// Everything the group changed, as one batch.
    func batch() -> EngineBatch {
        var batch = appender.batch
        batch.lineageStates = changedLineages.sorted().compactMap { lineage in
            guard let now = state.lineages[lineage], now != persistedLineages[lineage] else { return nil }
            return (lineage, now)
        }
        batch.deletedAccounts = changedDeleted
        batch.staff = changedStaff.sorted().map { ($0, state.staff[$0]) }
        batch.transferCases = changedCases.sorted().compactMap { id in state.transfers[id].map { (id, $0) } }
        batch.vaultInserts = vaultInserts
        batch.vaultErasures = vaultErasures
        return batch
    }
}
