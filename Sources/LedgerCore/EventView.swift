/// A record's event as the plain values a whole-log replay (`verify`, `rebuild`) checks and folds:
/// no strings, no boxes, nothing reference-counted, so a batch of them moves between threads and is
/// freed without an allocation or a reference count per event. A product id is a number the caller
/// gives it (``init(_:product:)``, ``RecordViewDecoder``).
///
/// Views cover the kinds nearly every record is made of (the facts, the effects, the decision); a
/// roster or transfer step or the upgrade record has none (``init(_:product:)`` is nil) and is checked
/// from its ``LedgerEvent``.
public struct EventView: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        case transactionSubmitted, notificationReceived, accountDeletionRequested, lineageBound, entitlementGranted,
            entitlementEnded, entitlementRevoked, entitlementReinstated, lineageTombstoned, accountDeleted, decisionIssued
    }

    public var kind: Kind
    /// A grant's product id, by the caller's number.
    public var product: UInt32 = 0
    // Stored in 56 bytes (not the ~96 of the optionals side by side): a replay writes and reads
    // three views a record through its batches, so their size is memory traffic on both threads.
    private var lineageKey = Key128.zero
    private var accountKey = Key128.zero
    private var timeValue: Timestamp = 0
    private var purchaseDate: Timestamp = 0
    /// Which of the optional values are present (the ``Present`` bits), and "family shared".
    private var present: UInt8 = 0
    private var submissionRaw: UInt8 = 0
    /// An end's or a decision's reason (``Present/endReason``, ``Present/decision`` say which).
    private var reasonRaw: UInt8 = 0

    private enum Present {
        static let lineage: UInt8 = 1, account: UInt8 = 2, transaction: UInt8 = 4, familyShared: UInt8 = 8, time: UInt8 = 16,
            submission: UInt8 = 32, endReason: UInt8 = 64, decision: UInt8 = 128
    }

    private mutating func set(_ bit: UInt8, _ isPresent: Bool) { present = isPresent ? present | bit : present & ~bit }
    private func has(_ bit: UInt8) -> Bool { present & bit != 0 }

    /// The reason byte is shared: setting one reason replaces the other; clearing one leaves the other.
    private mutating func setReason(_ raw: UInt8?, owner: UInt8) {
        if let raw {
            reasonRaw = raw
            present = (present & ~(Present.endReason | Present.decision)) | owner
        } else if has(owner) {
            reasonRaw = 0
            set(owner, false)
        }
    }

    /// The lineage the event names (``LedgerEvent/lineage``).
    public var lineage: LineageKey? {
        get { has(Present.lineage) ? LineageKey(lineageKey) : nil }
        set {
            lineageKey = newValue?.key ?? .zero
            set(Present.lineage, newValue != nil)
        }
    }
    /// A submission's account, the account of an effect or a deletion, a decision's account.
    public var account: AccountID? {
        get { has(Present.account) ? AccountID(accountKey) : nil }
        set {
            accountKey = newValue?.key ?? .zero
            set(Present.account, newValue != nil)
        }
    }
    /// A submission's kind.
    public var submission: SubmissionKind? {
        get { has(Present.submission) ? SubmissionKind(rawValue: submissionRaw) : nil }
        set {
            submissionRaw = newValue?.rawValue ?? 0
            set(Present.submission, newValue != nil)
        }
    }
    /// Of a submission's or a notification's transaction (nil: a notification without one): whether
    /// it is family shared, and its purchase date.
    public var transaction: (familyShared: Bool, purchaseDate: Timestamp)? {
        get { has(Present.transaction) ? (has(Present.familyShared), purchaseDate) : nil }
        set {
            purchaseDate = newValue?.purchaseDate ?? 0
            set(Present.transaction, newValue != nil)
            set(Present.familyShared, newValue?.familyShared == true)
        }
    }
    /// A grant's ``EntitlementGranted/purchasedAt`` (kept where a fact keeps its transaction's
    /// purchase date: a grant has no transaction).
    public var purchasedAt: Timestamp? {
        get { kind == .entitlementGranted ? transaction?.purchaseDate : nil }
        set { transaction = newValue.map { (false, $0) } }
    }
    /// A grant's expiry, a revocation's time.
    public var time: Timestamp? {
        get { has(Present.time) ? timeValue : nil }
        set {
            timeValue = newValue ?? 0
            set(Present.time, newValue != nil)
        }
    }
    /// An end's reason.
    public var endReason: EntitlementEndReason? {
        get { has(Present.endReason) ? EntitlementEndReason(rawValue: reasonRaw) : nil }
        set { setReason(newValue?.rawValue, owner: Present.endReason) }
    }
    /// A decision's reason.
    public var decision: DecisionReason? {
        get { has(Present.decision) ? DecisionReason(rawValue: reasonRaw) : nil }
        set { setReason(newValue?.rawValue, owner: Present.decision) }
    }

    public init(kind: Kind, lineage: LineageKey? = nil, account: AccountID? = nil) {
        self.kind = kind
        self.lineage = lineage
        self.account = account
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.kind == b.kind && a.lineage == b.lineage && a.account == b.account && a.submission == b.submission
            && a.transaction?.familyShared == b.transaction?.familyShared && a.transaction?.purchaseDate == b.transaction?.purchaseDate
            && a.time == b.time && a.product == b.product && a.endReason == b.endReason && a.decision == b.decision
    }

    /// The view of `event` (`product` numbers a grant's product id), or nil for a roster or transfer
    /// step or the upgrade record.
    public init?(_ event: LedgerEvent, product: (String) -> UInt32) {
        func facts(_ t: TransactionFacts) -> (Bool, Timestamp) { (t.ownership == .familyShared, t.purchaseDate) }
        switch event {
        case .transactionSubmitted(let e):
            self.init(kind: .transactionSubmitted, lineage: e.lineage, account: e.account)
            (submission, transaction) = (e.kind, facts(e.transaction))
        case .notificationReceived(let e):
            self.init(kind: .notificationReceived, lineage: e.lineage)
            transaction = e.transaction.map(facts)
        case .accountDeletionRequested(let account):
            self.init(kind: .accountDeletionRequested, account: account)
        case .lineageBound(let lineage, let account):
            self.init(kind: .lineageBound, lineage: lineage, account: account)
        case .entitlementGranted(let e):
            self.init(kind: .entitlementGranted, lineage: e.lineage, account: e.account)
            purchasedAt = e.purchasedAt
            (time, self.product) = (e.expiresAt, product(e.productId))
        case .entitlementEnded(let lineage, let account, let reason):
            self.init(kind: .entitlementEnded, lineage: lineage, account: account)
            endReason = reason
        case .entitlementRevoked(let lineage, let account, let revokedAt):
            self.init(kind: .entitlementRevoked, lineage: lineage, account: account)
            time = revokedAt
        case .entitlementReinstated(let lineage, let account):
            self.init(kind: .entitlementReinstated, lineage: lineage, account: account)
        case .lineageTombstoned(let lineage, let account):
            self.init(kind: .lineageTombstoned, lineage: lineage, account: account)
        case .accountDeleted(let account):
            self.init(kind: .accountDeleted, account: account)
        case .decisionIssued(let e):
            self.init(kind: .decisionIssued, lineage: e.lineage, account: e.account)
            decision = e.reason
        case .staffEnrolled, .staffRemoved, .rosterChangeProposed, .transferRequested, .transferApproved, .transferApplied,
            .transferRefused, .storeUpgraded:
            return nil
        }
    }

    /// ``LedgerEvent/name``.
    public var name: String {
        switch kind {
        case .transactionSubmitted: "transaction-submitted"
        case .notificationReceived: "notification-received"
        case .accountDeletionRequested: "account-deletion-requested"
        case .lineageBound: "lineage-bound"
        case .entitlementGranted: "entitlement-granted"
        case .entitlementEnded: "entitlement-ended"
        case .entitlementRevoked: "entitlement-revoked"
        case .entitlementReinstated: "entitlement-reinstated"
        case .lineageTombstoned: "lineage-tombstoned"
        case .accountDeleted: "account-deleted"
        case .decisionIssued: "decision-issued"
        }
    }
}

/// The numbers a replay's reading thread gives the product ids of the views it makes: in order of
/// first sight, from 0, the names numbered since the last ``takeNewNames()`` handed on with them.
public struct ViewProductNumbers {
    private var numbers: [String: UInt32] = [:]
    private var last: (name: String, number: UInt32)?
    private var newNames: [String] = []

    public init() {}

    /// The number of `name` (numbered when new).
    public mutating func number(of name: String) -> UInt32 {
        if let last, last.name == name { return last.number }
        let number: UInt32
        if let known = numbers[name] {
            number = known
        } else {
            number = UInt32(numbers.count)
            numbers[name] = number
            newNames.append(name)
        }
        last = (name, number)
        return number
    }

    /// The names numbered since the last call, in order of their numbers.
    public mutating func takeNewNames() -> [String] {
        defer { newNames = [] }
        return newNames
    }
}

/// Decodes a log's records one after another straight into views (``EventView``), without making a
/// ``LedgerEvent``, a string or an allocation for the usual record: a replay's reading thread.
///
/// It reads the bytes exactly as ``RecordCodec/decode(_:sequence:)`` does, and gives the same
/// result: the views of the events that decoder gives (product ids numbered by
/// ``ViewProductNumbers``), or, when an event has no view, those events, or the same error. Only
/// the plain, canonical forms of the views' kinds are read here; anything else (a value written out
/// as a string, a kind without a view, bytes that do not decode) is handed to ``RecordDecoder``,
/// which makes the events or names the error. Not for sharing between threads.
public struct RecordViewDecoder {
    /// What a decoded record is besides its events.
    public struct Header: Sendable {
        public var recordedAt: Timestamp
        public var command: Key128
    }

    private let full = RecordDecoder()
    private var numbers = ViewProductNumbers()
    /// Product ids seen (their bytes, validated, and their string), and the one found last.
    private var products: [(bytes: [UInt8], name: String, number: UInt32?)] = []
    private var lastProduct = 0
    /// The events of a record decoded in full.
    private var decoded: [LedgerEvent] = []

    public init() {}

    /// Decodes `stored` and appends its views to `views` when each of its events has one, else its
    /// events to `events`; appends nothing and throws ``RecordCodec/decode(_:sequence:)``'s error
    /// when the bytes do not decode.
    public mutating func decode(
        _ stored: UnsafeRawBufferPointer, sequence: UInt64, views: inout [EventView], events: inout [LedgerEvent]
    ) throws(RecordDecodingError) -> Header {
        if let header = viewed(stored, into: &views) { return header }
        decoded.removeAll(keepingCapacity: true)
        let record = try full.decode(stored, sequence: sequence, appendingEventsTo: &decoded)
        let start = views.count
        for event in decoded {
            guard let view = EventView(event, product: { numbers.number(of: $0) }) else {
                views.removeSubrange(start...)
                events.append(contentsOf: decoded)
                break
            }
            views.append(view)
        }
        return Header(recordedAt: record.recordedAt, command: record.command)
    }

    /// The names of the product ids numbered since the last call (``ViewProductNumbers/takeNewNames()``).
    public mutating func takeNewProductNames() -> [String] { numbers.takeNewNames() }

    /// ``RecordDecoder/forgetStrings()`` of the decoder that decodes in full.
    public func forgetStrings() { full.forgetStrings() }

    /// What ``EventCodec``'s decoder tracks of a record: the targets of back-references.
    private struct Context {
        var at: Timestamp
        var lineage: LineageKey?
        var account: AccountID?
        /// Index in `products`.
        var product: Int?
        var expires: Timestamp?
        var purchase: Timestamp?
        var sawTransaction = false
    }

    /// Not a view: hand the record to the full decoder.
    private struct NotViewed: Error {}

    /// The record's header after appending its views, or nil (nothing appended) when any of it is not
    /// the plain canonical form of a view.
    private mutating func viewed(_ stored: UnsafeRawBufferPointer, into views: inout [EventView]) -> Header? {
        let start = views.count
        var r = ByteReader(stored)
        do {
            guard try r.u8() == RecordCodec.formatVersion else { throw NotViewed() }
            let recordedAt = Int64(try r.u48())
            let command = try r.key()
            let (at, overflow) = recordedAt.addingReportingOverflow(try r.zigzag())
            guard !overflow, try r.varint() <= UInt64(UInt32.max), r.remaining > 0 else { throw NotViewed() }
            var context = Context(at: at)
            while r.remaining > 0 { views.append(try view(&r, &context)) }
            return Header(recordedAt: recordedAt, command: command)
        } catch {
            views.removeSubrange(start...)
            return nil
        }
    }

    private func time(_ r: inout ByteReader, _ context: Context) throws -> Timestamp {
        let (value, overflow) = context.at.addingReportingOverflow(try r.zigzag())
        guard !overflow else { throw NotViewed() }
        return value
    }

    /// Refuses head flags beside `allowed` (and the tag).
    private func allow(_ head: UInt8, _ allowed: UInt8) throws {
        guard head & ~EventCodec.tagMask & ~allowed == 0 else { throw NotViewed() }
    }

    private func lineage(_ head: UInt8, _ r: inout ByteReader, _ context: inout Context) throws -> LineageKey {
        try key(referenced: head & EventCodec.lineageFlag != 0, &r, &context.lineage, LineageKey.init)
    }

    private func account(_ head: UInt8, _ r: inout ByteReader, _ context: inout Context) throws -> AccountID {
        try key(referenced: head & EventCodec.accountFlag != 0, &r, &context.account, AccountID.init)
    }

    /// A lineage or account key: the record's first one (read, and kept as `current`), a reference to
    /// it, or another written out (never the first one written again: the full decoder's form).
    private func key<Key: Equatable>(
        referenced: Bool, _ r: inout ByteReader, _ current: inout Key?, _ make: (Key128) -> Key
    ) throws -> Key {
        if referenced {
            guard let current else { throw NotViewed() }
            return current
        }
        let key = make(try r.key())
        guard let first = current else {
            current = key
            return key
        }
        guard first != key else { throw NotViewed() }
        return key
    }

    /// The index in `products` of the product id read (or referenced).
    private mutating func product(_ referenced: Bool, _ r: inout ByteReader, _ context: inout Context) throws -> Int {
        if referenced {
            guard let product = context.product else { throw NotViewed() }
            return product
        }
        let bytes = try r.shortBytesInPlace()
        let product = try known(bytes)
        guard let current = context.product else {
            context.product = product
            return product
        }
        // Compared as the full decoder compares them: as strings.
        guard current != product, products[current].name != products[product].name else { throw NotViewed() }
        return product
    }

    /// The index of the product id whose UTF-8 is `bytes`, validated and kept when new.
    private mutating func known(_ bytes: UnsafeRawBufferPointer) throws -> Int {
        func same(_ known: [UInt8]) -> Bool {
            known.count == bytes.count && known.withUnsafeBytes { DecodedStrings.equal($0, bytes) }
        }
        if lastProduct < products.count, same(products[lastProduct].bytes) { return lastProduct }
        if let index = products.firstIndex(where: { same($0.bytes) }) {
            lastProduct = index
            return index
        }
        guard let name = String(validating: bytes, as: UTF8.self) else { throw NotViewed() }
        products.append((Array(bytes), name, nil))
        lastProduct = products.count - 1
        return lastProduct
    }

    private mutating func view(_ r: inout ByteReader, _ context: inout Context) throws -> EventView {
        let head = try r.u8()
        let both = EventCodec.lineageFlag | EventCodec.accountFlag
        switch EventCodec.Tag(rawValue: head & EventCodec.tagMask) {
        case .transactionSubmitted:
            try allow(head, both)
            let kindByte = try r.u8()
            guard let kind = SubmissionKind(rawValue: kindByte & 0x3F) else { throw NotViewed() }
            if kindByte & 0x80 == 0 { try allow(head, EventCodec.lineageFlag) }
            let account = kindByte & 0x80 == 0 ? nil : try self.account(head, &r, &context)
            var view = EventView(kind: .transactionSubmitted, lineage: try lineage(head, &r, &context), account: account)
            view.submission = kind
            view.transaction = try transaction(&r, &context)
            return view
        case .notificationReceived:
            try allow(head, EventCodec.lineageFlag)
            let flags = try r.u8()
            guard flags & ~15 == 0, flags & 2 != 0 || flags & EventCodec.notificationUpgraded == 0 else { throw NotViewed() }
            if flags & 1 == 0 { try allow(head, 0) }
            try code(&r, EventCodec.notificationTypes.count)
            if flags & 4 != 0 { try code(&r, EventCodec.notificationSubtypes.count) }
            _ = try time(&r, context)
            var view = EventView(kind: .notificationReceived, lineage: flags & 1 == 0 ? nil : try lineage(head, &r, &context))
            if flags & 2 != 0 { view.transaction = try transaction(&r, &context) }
            return view
        case .accountDeletionRequested:
            try allow(head, EventCodec.accountFlag)
            return EventView(kind: .accountDeletionRequested, account: try account(head, &r, &context))
        case .lineageBound:
            return try pair(.lineageBound, head, &r, &context)
        case .entitlementGranted:
            let flags = try r.u8()
            guard flags & ~15 == 0, flags & 3 != 2, flags & 12 != 12 else { throw NotViewed() }
            var view = EventView(
                kind: .entitlementGranted, lineage: try lineage(head, &r, &context), account: try account(head, &r, &context))
            let product = try self.product(head & EventCodec.productFlag != 0, &r, &context)
            if products[product].number == nil { products[product].number = numbers.number(of: products[product].name) }
            view.product = products[product].number ?? 0
            if flags & 2 != 0 {
                guard context.sawTransaction, let expires = context.expires else { throw NotViewed() }
                view.time = expires
            } else if flags & 1 != 0 {
                let expires = try time(&r, context)
                guard !(context.sawTransaction && context.expires == expires) else { throw NotViewed() }
                view.time = expires
            }
            if flags & EventCodec.grantRepeatsPurchase != 0 {
                guard context.sawTransaction, let purchase = context.purchase else { throw NotViewed() }
                view.purchasedAt = purchase
            } else if flags & EventCodec.grantPurchase != 0 {
                let purchase = try time(&r, context)
                guard !(context.sawTransaction && context.purchase == purchase) else { throw NotViewed() }
                view.purchasedAt = purchase
            }
            return view
        case .entitlementEnded:
            var view = try pair(.entitlementEnded, head, &r, &context)
            guard let reason = EntitlementEndReason(rawValue: try r.u8()) else { throw NotViewed() }
            view.endReason = reason
            return view
        case .entitlementRevoked:
            var view = try pair(.entitlementRevoked, head, &r, &context)
            view.time = try time(&r, context)
            return view
        case .entitlementReinstated:
            return try pair(.entitlementReinstated, head, &r, &context)
        case .lineageTombstoned:
            return try pair(.lineageTombstoned, head, &r, &context)
        case .accountDeleted:
            try allow(head, EventCodec.accountFlag)
            return EventView(kind: .accountDeleted, account: try account(head, &r, &context))
        case .decisionIssued:
            try allow(head, both)
            let byte = try r.u8()
            guard let reason = DecisionReason(rawValue: byte & 0x3F) else { throw NotViewed() }
            if byte & 0x40 == 0 { try allow(head, EventCodec.accountFlag) }
            if byte & 0x80 == 0 { try allow(head, EventCodec.lineageFlag) }
            let lineage = byte & 0x40 == 0 ? nil : try self.lineage(head, &r, &context)
            var view = EventView(kind: .decisionIssued, lineage: lineage, account: byte & 0x80 == 0 ? nil : try account(head, &r, &context))
            view.decision = reason
            return view
        case .staffEnrolled, .staffRemoved, .transferRequested, .transferApproved, .transferApplied, .transferRefused, .storeUpgraded,
            .rosterChangeProposed, nil:
            throw NotViewed()
        }
    }

    private func pair(_ kind: EventView.Kind, _ head: UInt8, _ r: inout ByteReader, _ context: inout Context) throws -> EventView {
        try allow(head, EventCodec.lineageFlag | EventCodec.accountFlag)
        let lineage = try self.lineage(head, &r, &context)
        return EventView(kind: kind, lineage: lineage, account: try account(head, &r, &context))
    }

    /// A coded value of a table of `count` (a value written out as a string is not read here).
    private func code(_ r: inout ByteReader, _ count: Int) throws {
        let code = try r.varint()
        guard code > 0, code <= UInt64(count) else { throw NotViewed() }
    }

    private mutating func transaction(_ r: inout ByteReader, _ context: inout Context) throws -> (familyShared: Bool, purchaseDate: Timestamp) {
        let flags = try r.u8()
        guard Provenance(rawValue: flags >> 2 & 3) != nil else { throw NotViewed() }
        _ = try r.key()
        _ = try product(flags & 0x40 != 0, &r, &context)
        let purchase = try time(&r, context)
        var expires: Timestamp?
        if flags & 0x10 != 0 {
            let (value, overflow) = purchase.addingReportingOverflow(try r.zigzag())
            guard !overflow else { throw NotViewed() }
            expires = value
        }
        if flags & 0x20 != 0 { _ = try time(&r, context) }
        _ = try time(&r, context)
        // An environment or an ownership written out as a string is not read here.
        guard flags & 0x80 == 0, Int(try r.u8()) < EventCodec.environments.count, flags & 3 < 2 else { throw NotViewed() }
        if !context.sawTransaction {
            context.sawTransaction = true
            context.expires = expires
            context.purchase = purchase
        }
        return (flags & 3 == 1, purchase)
    }
}
