/// Storage format 2 of a record's events (`docs/storage-format.md` lists every layout).
///
/// Each event is a head byte, then its fields. The head byte holds the tag in its low 5 bits and
/// three back-reference flags: `0x20` the event's lineage is the record's lineage, `0x40` its account
/// is the record's account, `0x80` its product is the record's product. The record's lineage,
/// account and product are the first of each its events name (normally the fact's), so the effects
/// and the decision that repeat them cost one bit instead of 16 or ~40 bytes.
///
/// Times are zigzag varints relative to the record's `at` (an expiry relative to its purchase);
/// keys are 16 bytes; strings and byte strings carry a varint length; notification types, subtypes,
/// environments, ownership and provenance are small codes with a string escape for values the
/// tables do not know. Decoding is strict and canonical: a flag where none may be, a value written
/// out that a back-reference or a code would express, an overlong varint, or an unknown tag or
/// code is an error, so every record has exactly one encoding.
///
/// - Warning: The tags, codes and tables are the storage format: append new entries; never reorder,
///   remove or reuse one.
public enum EventCodec {
    static let lineageFlag: UInt8 = 0x20
    static let accountFlag: UInt8 = 0x40
    static let productFlag: UInt8 = 0x80
    static let tagMask: UInt8 = 0x1F

    enum Tag: UInt8 {
        case transactionSubmitted = 1, notificationReceived, accountDeletionRequested, lineageBound, entitlementGranted,
            entitlementEnded, entitlementRevoked, entitlementReinstated, lineageTombstoned, accountDeleted, staffEnrolled,
            staffRemoved, transferRequested, transferApproved, transferApplied, transferRefused, decisionIssued, storeUpgraded,
            rosterChangeProposed
    }

    /// App Store Server Notification types, code = index + 1 (code 0: the type follows as a string).
    public static let notificationTypes = [
        "SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "DID_CHANGE_RENEWAL_PREF", "DID_FAIL_TO_RENEW", "EXPIRED",
        "GRACE_PERIOD_EXPIRED", "OFFER_REDEEMED", "PRICE_INCREASE", "REFUND", "REFUND_DECLINED", "REFUND_REVERSED",
        "RENEWAL_EXTENDED", "RENEWAL_EXTENSION", "REVOKE", "CONSUMPTION_REQUEST", "TEST", "EXTERNAL_PURCHASE_TOKEN",
        "ONE_TIME_CHARGE", "METADATA_UPDATE", "MIGRATION", "PRICE_CHANGE", "RESCIND_CONSENT",
    ]
    /// Notification subtypes, coded the same way.
    public static let notificationSubtypes = [
        "INITIAL_BUY", "RESUBSCRIBE", "DOWNGRADE", "UPGRADE", "AUTO_RENEW_ENABLED", "AUTO_RENEW_DISABLED", "VOLUNTARY",
        "BILLING_RETRY", "PRICE_INCREASE", "GRACE_PERIOD", "PENDING", "ACCEPTED", "BILLING_RECOVERY", "PRODUCT_NOT_FOR_SALE",
        "SUMMARY", "FAILURE", "UNREPORTED", "ACTIVE_TOKEN_REMINDER", "CREATED",
    ]
    /// App Store environments, code = index (255: the environment follows as a string).
    public static let environments = ["Production", "Sandbox", "Xcode", "LocalTesting"]

    /// What the record's events have named so far: the targets of back-references.
    struct Context {
        var at: Timestamp
        var lineage: LineageKey?
        var account: AccountID?
        var product: String?
        /// The expiry of the record's first transaction (a grant usually repeats it).
        var expires: Timestamp?
        /// The purchase date of the record's first transaction (a grant usually repeats it as its
        /// `purchasedAt`).
        var purchase: Timestamp?
        var sawTransaction = false
    }

    /// Bit of a transaction-submitted's kind byte, and of a notification-received's flags: the
    /// transaction is upgraded (``TransactionFacts/isUpgraded``).
    static let submissionUpgraded: UInt8 = 0x40
    static let notificationUpgraded: UInt8 = 0x08
    /// Bits of an entitlement-granted's flags: `purchasedAt` is the record's transaction's purchase
    /// date (no bytes), or it is written out.
    static let grantRepeatsPurchase: UInt8 = 0x04
    static let grantPurchase: UInt8 = 0x08

    // MARK: Encoding

    /// Appends the events of a record whose business time is `at`.
    public static func encode(_ events: [LedgerEvent], at: Timestamp, into w: inout ByteWriter) {
        var encoder = Encoder(context: Context(at: at))
        for event in events { encoder.encode(event, into: &w) }
    }

    struct Encoder {
        var context: Context

        /// The head byte's flag for `lineage` (set when it repeats the record's lineage); the
        /// first lineage named becomes the record's.
        mutating func flag(_ lineage: LineageKey) -> UInt8 {
            guard let current = context.lineage else {
                context.lineage = lineage
                return 0
            }
            return current == lineage ? lineageFlag : 0
        }

        mutating func flag(_ account: AccountID) -> UInt8 {
            guard let current = context.account else {
                context.account = account
                return 0
            }
            return current == account ? accountFlag : 0
        }

        mutating func flag(product: String) -> UInt8 {
            guard let current = context.product else {
                context.product = product
                return 0
            }
            return current == product ? productFlag : 0
        }

        func time(_ value: Timestamp, _ w: inout ByteWriter) { w.zigzag(value &- context.at) }

        mutating func encode(_ event: LedgerEvent, into w: inout ByteWriter) {
            switch event {
            case .transactionSubmitted(let e):
                let flags = (e.account.map { flag($0) } ?? 0) | flag(e.lineage)
                w.u8(Tag.transactionSubmitted.rawValue | flags)
                w.u8(e.kind.rawValue | (e.account == nil ? 0 : 0x80) | (e.transaction.isUpgraded ? EventCodec.submissionUpgraded : 0))
                if let account = e.account, flags & accountFlag == 0 { w.key(account.key) }
                if flags & lineageFlag == 0 { w.key(e.lineage.key) }
                transaction(e.transaction, &w)
            case .notificationReceived(let e):
                let flags = e.lineage.map { flag($0) } ?? 0
                w.u8(Tag.notificationReceived.rawValue | flags)
                w.u8(
                    (e.lineage == nil ? 0 : 1) | (e.transaction == nil ? 0 : 2) | (e.subtype == nil ? 0 : 4)
                        | (e.transaction?.isUpgraded == true ? EventCodec.notificationUpgraded : 0))
                code(e.notificationType, in: EventCodec.notificationTypes, &w)
                if let subtype = e.subtype { code(subtype, in: EventCodec.notificationSubtypes, &w) }
                time(e.signedDate, &w)
                if let lineage = e.lineage, flags & lineageFlag == 0 { w.key(lineage.key) }
                if let transaction = e.transaction { self.transaction(transaction, &w) }
            case .accountDeletionRequested(let account):
                simple(.accountDeletionRequested, lineage: nil, account: account, &w)
            case .lineageBound(let lineage, let account):
                simple(.lineageBound, lineage: lineage, account: account, &w)
            case .entitlementGranted(let e):
                let flags = flag(e.lineage) | flag(e.account) | flag(product: e.productId)
                w.u8(Tag.entitlementGranted.rawValue | flags)
                let repeatsExpiry = e.expiresAt != nil && e.expiresAt == context.expires && context.sawTransaction
                let repeatsPurchase = e.purchasedAt != nil && e.purchasedAt == context.purchase && context.sawTransaction
                w.u8(
                    (e.expiresAt == nil ? 0 : 1) | (repeatsExpiry ? 2 : 0)
                        | (repeatsPurchase ? EventCodec.grantRepeatsPurchase : e.purchasedAt == nil ? 0 : EventCodec.grantPurchase))
                if flags & lineageFlag == 0 { w.key(e.lineage.key) }
                if flags & accountFlag == 0 { w.key(e.account.key) }
                if flags & productFlag == 0 { w.shortString(e.productId) }
                if let expiresAt = e.expiresAt, !repeatsExpiry { time(expiresAt, &w) }
                if let purchasedAt = e.purchasedAt, !repeatsPurchase { time(purchasedAt, &w) }
            case .entitlementEnded(let lineage, let account, let reason):
                simple(.entitlementEnded, lineage: lineage, account: account, &w)
                w.u8(reason.rawValue)
            case .entitlementRevoked(let lineage, let account, let revokedAt):
                simple(.entitlementRevoked, lineage: lineage, account: account, &w)
                time(revokedAt, &w)
            case .entitlementReinstated(let lineage, let account):
                simple(.entitlementReinstated, lineage: lineage, account: account, &w)
            case .lineageTombstoned(let lineage, let account):
                simple(.lineageTombstoned, lineage: lineage, account: account, &w)
            case .accountDeleted(let account):
                simple(.accountDeleted, lineage: nil, account: account, &w)
            case .staffEnrolled(let e):
                let flags = e.ownAccount.map { flag($0) } ?? 0
                w.u8(Tag.staffEnrolled.rawValue | flags)
                w.shortString(e.staff)
                w.u8(e.roles.rawValue)
                w.shortBytes(e.publicKey)
                w.u8(
                    (e.ownAccount == nil ? 0 : 1) | (e.enrolledBy == nil ? 0 : 2) | (e.signedAfter == nil ? 0 : 4)
                        | (e.coSignedBy == nil ? 0 : 8))
                if let account = e.ownAccount, flags & accountFlag == 0 { w.key(account.key) }
                if let enrolledBy = e.enrolledBy { w.shortString(enrolledBy) }
                w.shortBytes(e.signature)
                signatures(e.signedAfter, e.coSignedBy, e.coSignature, &w)
            case .staffRemoved(let e):
                w.u8(Tag.staffRemoved.rawValue)
                w.shortString(e.staff)
                w.shortString(e.removedBy)
                w.shortBytes(e.signature)
                w.u8((e.signedAfter == nil ? 0 : 4) | (e.coSignedBy == nil ? 0 : 8))
                signatures(e.signedAfter, e.coSignedBy, e.coSignature, &w)
            case .rosterChangeProposed(let change):
                w.u8(Tag.rosterChangeProposed.rawValue)
                encode(change.event, into: &w)
            case .transferRequested(let e):
                let plan = e.plan
                let flags = flag(plan.lineage) | flag(plan.source.account)
                w.u8(Tag.transferRequested.rawValue | flags)
                w.shortString(plan.caseId)
                if flags & lineageFlag == 0 { w.key(plan.lineage.key) }
                w.u8(sourceKind(plan.source) | (plan.formatOneLineageSuffix == nil ? 0 : 0x80))
                if flags & accountFlag == 0 { w.key(plan.source.account.key) }
                w.key(plan.target.key)
                w.varint(plan.lineageVersion)
                w.shortString(plan.targetAuthentication)
                w.shortString(plan.ownershipEvidence)
                w.shortString(plan.reason)
                if let suffix = plan.formatOneLineageSuffix { w.key(suffix) }
                w.digest(e.planDigest)
                w.shortString(e.requestedBy)
                w.shortBytes(e.signature)
            case .transferApproved(let e):
                w.u8(Tag.transferApproved.rawValue)
                w.shortString(e.caseId)
                w.digest(e.planDigest)
                w.shortString(e.approvedBy)
                w.shortBytes(e.signature)
            case .transferApplied(let e):
                let flags = flag(e.lineage) | flag(e.source.account)
                w.u8(Tag.transferApplied.rawValue | flags)
                w.shortString(e.caseId)
                w.digest(e.planDigest)
                if flags & lineageFlag == 0 { w.key(e.lineage.key) }
                w.u8(sourceKind(e.source))
                if flags & accountFlag == 0 { w.key(e.source.account.key) }
                w.key(e.target.key)
                w.shortString(e.appliedBy)
                w.shortBytes(e.signature)
            case .transferRefused(let e):
                let flags = e.lineage.map { flag($0) } ?? 0
                w.u8(Tag.transferRefused.rawValue | flags)
                w.shortString(e.caseId)
                w.shortString(e.step)
                w.shortString(e.staff)
                w.shortString(e.reason)
                w.u8(e.lineage == nil ? 0 : 1)
                if let lineage = e.lineage, flags & lineageFlag == 0 { w.key(lineage.key) }
            case .decisionIssued(let e):
                let flags = (e.lineage.map { flag($0) } ?? 0) | (e.account.map { flag($0) } ?? 0)
                w.u8(Tag.decisionIssued.rawValue | flags)
                w.u8(e.reason.rawValue | (e.lineage == nil ? 0 : 0x40) | (e.account == nil ? 0 : 0x80))
                if let lineage = e.lineage, flags & lineageFlag == 0 { w.key(lineage.key) }
                if let account = e.account, flags & accountFlag == 0 { w.key(account.key) }
            case .storeUpgraded(let e):
                w.u8(Tag.storeUpgraded.rawValue)
                w.u8(e.fromFormat)
                w.varint(e.records)
                w.digest(e.headHash)
                w.digest(e.merkleRoot)
                w.varint(e.copiedRecords)
            }
        }

        /// A roster change's nonce and second signature, as its flags (4, 8) announce them.
        func signatures(_ signedAfter: UInt64?, _ coSignedBy: StaffID?, _ coSignature: [UInt8], _ w: inout ByteWriter) {
            if let signedAfter { w.varint(signedAfter) }
            if let coSignedBy {
                w.shortString(coSignedBy)
                w.shortBytes(coSignature)
            }
        }

        /// An event made of a lineage (optional) and an account, each inline or a back-reference.
        mutating func simple(_ tag: Tag, lineage: LineageKey?, account: AccountID, _ w: inout ByteWriter) {
            let flags = (lineage.map { flag($0) } ?? 0) | flag(account)
            w.u8(tag.rawValue | flags)
            if let lineage, flags & lineageFlag == 0 { w.key(lineage.key) }
            if flags & accountFlag == 0 { w.key(account.key) }
        }

        mutating func transaction(_ t: TransactionFacts, _ w: inout ByteWriter) {
            let productFlags = flag(product: t.productId)
            if !context.sawTransaction {
                context.sawTransaction = true
                context.expires = t.expiresDate
                context.purchase = t.purchaseDate
            }
            let ownership: UInt8 =
                switch t.ownership {
                case .purchased: 0
                case .familyShared: 1
                case .other: 2
                }
            let environment = EventCodec.environments.firstIndex(of: t.environment)
            w.u8(
                ownership | t.provenance.rawValue << 2 | (t.expiresDate == nil ? 0 : 0x10) | (t.revocationDate == nil ? 0 : 0x20)
                    | (productFlags == 0 ? 0 : 0x40) | (environment == nil ? 0x80 : 0))
            w.key(t.transactionKey)
            if productFlags == 0 { w.shortString(t.productId) }
            time(t.purchaseDate, &w)
            if let expires = t.expiresDate { w.zigzag(expires &- t.purchaseDate) }
            if let revocation = t.revocationDate { time(revocation, &w) }
            time(t.signedDate, &w)
            if let environment { w.u8(UInt8(environment)) } else { w.shortString(t.environment) }
            if case .other(let value) = t.ownership { w.shortString(value) }
        }

        func code(_ value: String, in table: [String], _ w: inout ByteWriter) {
            if let index = table.firstIndex(of: value) {
                w.varint(UInt64(index + 1))
            } else {
                w.varint(0)
                w.shortString(value)
            }
        }

        func sourceKind(_ source: PlanSource) -> UInt8 {
            switch source {
            case .bound: 1
            case .tombstoned: 2
            }
        }
    }

    // MARK: Decoding

    /// Decodes the events of a record whose business time is `at`, through the end of the reader.
    public static func decode(from r: inout ByteReader, at: Timestamp) throws(DecodingFailure) -> [LedgerEvent] {
        var events: [LedgerEvent] = []
        events.reserveCapacity(4)
        try decode(from: &r, at: at, appendingTo: &events, strings: nil)
        return events
    }

    /// Appends the events of a record whose business time is `at` to `events` (on failure, some may
    /// have been appended); product ids come through `strings` when given (``RecordDecoder``).
    static func decode(
        from r: inout ByteReader, at: Timestamp, appendingTo events: inout [LedgerEvent], strings: DecodedStrings?
    ) throws(DecodingFailure) {
        var decoder = Decoder(context: Context(at: at), strings: strings)
        let start = events.count
        while r.remaining > 0 { events.append(try decoder.decode(&r)) }
        guard events.count > start else { throw DecodingFailure("a record holds no event") }
    }

    /// `base + delta`, refusing a time outside the 64-bit range.
    static func offset(_ base: Timestamp, by delta: Int64) throws(DecodingFailure) -> Timestamp {
        let (value, overflow) = base.addingReportingOverflow(delta)
        guard !overflow else { throw DecodingFailure("a time offset overflows") }
        return value
    }

    struct Decoder {
        var context: Context
        /// Product ids decoded before (nil: each is validated and allocated anew).
        let strings: DecodedStrings?
        /// Whether an event is being decoded inside a roster-change proposal (which holds exactly one
        /// roster change, never another proposal: damaged bytes must not recurse without end).
        var insideProposal = false

        func time(_ r: inout ByteReader) throws(DecodingFailure) -> Timestamp { try offset(context.at, by: try r.zigzag()) }

        /// A lineage: the record's (when `flags` has the lineage flag) or 16 bytes, which must not
        /// repeat the record's lineage (that has one encoding: the flag).
        mutating func lineage(_ flags: UInt8, _ r: inout ByteReader) throws(DecodingFailure) -> LineageKey {
            if flags & lineageFlag != 0 {
                guard let lineage = context.lineage else { throw DecodingFailure("a lineage back-reference before any lineage") }
                return lineage
            }
            let lineage = LineageKey(try r.key())
            guard let current = context.lineage else {
                context.lineage = lineage
                return lineage
            }
            guard current != lineage else { throw DecodingFailure("the record's lineage written out instead of referenced") }
            return lineage
        }

        mutating func account(_ flags: UInt8, _ r: inout ByteReader) throws(DecodingFailure) -> AccountID {
            if flags & accountFlag != 0 {
                guard let account = context.account else { throw DecodingFailure("an account back-reference before any account") }
                return account
            }
            let account = AccountID(try r.key())
            guard let current = context.account else {
                context.account = account
                return account
            }
            guard current != account else { throw DecodingFailure("the record's account written out instead of referenced") }
            return account
        }

        mutating func product(_ referenced: Bool, _ r: inout ByteReader) throws(DecodingFailure) -> String {
            if referenced {
                guard let product = context.product else { throw DecodingFailure("a product back-reference before any product") }
                return product
            }
            let product: String
            if let strings { product = try r.shortString(through: strings) } else { product = try r.shortString() }
            guard let current = context.product else {
                context.product = product
                return product
            }
            guard current != product else { throw DecodingFailure("the record's product written out instead of referenced") }
            return product
        }

        /// Refuses head flags an event cannot carry.
        func allow(_ head: UInt8, _ allowed: UInt8, _ name: String) throws(DecodingFailure) {
            guard head & ~tagMask & ~allowed == 0 else { throw DecodingFailure("\(name) with invalid flags 0x\(String(head, radix: 16))") }
        }

        func code(_ r: inout ByteReader, in table: [String], _ name: String) throws(DecodingFailure) -> String {
            let code = try r.varint()
            guard code > 0 else {
                let value = try r.shortString()
                guard !table.contains(value) else { throw DecodingFailure("\(name) \(value) written out instead of coded") }
                return value
            }
            guard code <= UInt64(table.count) else { throw DecodingFailure("unknown \(name) code \(code)") }
            return table[Int(code - 1)]
        }

        mutating func decode(_ r: inout ByteReader) throws(DecodingFailure) -> LedgerEvent {
            let head = try r.u8()
            guard let tag = Tag(rawValue: head & tagMask) else { throw DecodingFailure("unknown event tag \(head & tagMask)") }
            switch tag {
            case .transactionSubmitted:
                try allow(head, lineageFlag | accountFlag, "transaction-submitted")
                let kindByte = try r.u8()
                guard let kind = SubmissionKind(rawValue: kindByte & 0x3F) else { throw DecodingFailure("unknown submission kind \(kindByte)") }
                if kindByte & 0x80 == 0 { try allow(head, lineageFlag, "transaction-submitted without an account") }
                let account = kindByte & 0x80 == 0 ? nil : try self.account(head, &r)
                let lineage = try self.lineage(head, &r)
                var transaction = try transaction(&r)
                transaction.isUpgraded = kindByte & EventCodec.submissionUpgraded != 0
                return .transactionSubmitted(TransactionSubmitted(kind: kind, account: account, lineage: lineage, transaction: transaction))
            case .notificationReceived:
                try allow(head, lineageFlag, "notification-received")
                let flags = try r.u8()
                guard flags & ~15 == 0, flags & 2 != 0 || flags & EventCodec.notificationUpgraded == 0 else {
                    throw DecodingFailure("notification-received with invalid flags \(flags)")
                }
                if flags & 1 == 0 { try allow(head, 0, "notification-received without a lineage") }
                let type = try code(&r, in: EventCodec.notificationTypes, "notification type")
                let subtype = flags & 4 == 0 ? nil : try code(&r, in: EventCodec.notificationSubtypes, "notification subtype")
                let signedDate = try time(&r)
                let lineage = flags & 1 == 0 ? nil : try self.lineage(head, &r)
                var transaction = flags & 2 == 0 ? nil : try self.transaction(&r)
                transaction?.isUpgraded = flags & EventCodec.notificationUpgraded != 0
                return .notificationReceived(
                    NotificationReceived(
                        notificationType: type, subtype: subtype, signedDate: signedDate, lineage: lineage, transaction: transaction))
            case .accountDeletionRequested:
                try allow(head, accountFlag, "account-deletion-requested")
                return .accountDeletionRequested(account: try account(head, &r))
            case .lineageBound:
                let (lineage, account) = try pair(head, &r, "lineage-bound")
                return .lineageBound(lineage: lineage, account: account)
            case .entitlementGranted:
                let flags = try r.u8()
                guard flags & ~15 == 0, flags & 3 != 2, flags & 12 != 12 else {
                    throw DecodingFailure("entitlement-granted with invalid flags \(flags)")
                }
                let lineage = try self.lineage(head, &r)
                let account = try self.account(head, &r)
                let product = try self.product(head & productFlag != 0, &r)
                var expiresAt: Timestamp?
                if flags & 2 != 0 {
                    guard context.sawTransaction, let expires = context.expires else {
                        throw DecodingFailure("an expiry back-reference without a transaction expiry")
                    }
                    expiresAt = expires
                } else if flags & 1 != 0 {
                    let expires = try time(&r)
                    guard !(context.sawTransaction && context.expires == expires) else {
                        throw DecodingFailure("the transaction's expiry written out instead of referenced")
                    }
                    expiresAt = expires
                }
                var purchasedAt: Timestamp?
                if flags & EventCodec.grantRepeatsPurchase != 0 {
                    guard context.sawTransaction, let purchase = context.purchase else {
                        throw DecodingFailure("a purchase back-reference without a transaction")
                    }
                    purchasedAt = purchase
                } else if flags & EventCodec.grantPurchase != 0 {
                    let purchase = try time(&r)
                    guard !(context.sawTransaction && context.purchase == purchase) else {
                        throw DecodingFailure("the transaction's purchase date written out instead of referenced")
                    }
                    purchasedAt = purchase
                }
                return .entitlementGranted(
                    EntitlementGranted(lineage: lineage, account: account, productId: product, expiresAt: expiresAt, purchasedAt: purchasedAt))
            case .entitlementEnded:
                let (lineage, account) = try pair(head, &r, "entitlement-ended")
                let raw = try r.u8()
                guard let reason = EntitlementEndReason(rawValue: raw) else { throw DecodingFailure("unknown end reason \(raw)") }
                return .entitlementEnded(lineage: lineage, account: account, reason: reason)
            case .entitlementRevoked:
                let (lineage, account) = try pair(head, &r, "entitlement-revoked")
                return .entitlementRevoked(lineage: lineage, account: account, revokedAt: try time(&r))
            case .entitlementReinstated:
                let (lineage, account) = try pair(head, &r, "entitlement-reinstated")
                return .entitlementReinstated(lineage: lineage, account: account)
            case .lineageTombstoned:
                let (lineage, account) = try pair(head, &r, "lineage-tombstoned")
                return .lineageTombstoned(lineage: lineage, formerAccount: account)
            case .accountDeleted:
                try allow(head, accountFlag, "account-deleted")
                return .accountDeleted(account: try account(head, &r))
            case .staffEnrolled:
                try allow(head, accountFlag, "staff-enrolled")
                let staff = try r.shortString()
                let roles = StaffRoles(rawValue: try r.u8())
                let publicKey = try r.shortBytes()
                let flags = try r.u8()
                guard flags & ~15 == 0 else { throw DecodingFailure("staff-enrolled with invalid flags \(flags)") }
                if flags & 1 == 0 { try allow(head, 0, "staff-enrolled without an own account") }
                let ownAccount = flags & 1 == 0 ? nil : try account(head, &r)
                let enrolledBy = flags & 2 == 0 ? nil : try r.shortString()
                let signature = try r.shortBytes()
                let (signedAfter, coSignedBy, coSignature) = try signatures(flags, &r)
                return .staffEnrolled(
                    StaffEnrolled(
                        staff: staff, roles: roles, publicKey: publicKey, ownAccount: ownAccount, enrolledBy: enrolledBy,
                        signature: signature, signedAfter: signedAfter, coSignedBy: coSignedBy, coSignature: coSignature))
            case .staffRemoved:
                try allow(head, 0, "staff-removed")
                let (staff, removedBy, signature) = (try r.shortString(), try r.shortString(), try r.shortBytes())
                let flags = try r.u8()
                guard flags & ~12 == 0 else { throw DecodingFailure("staff-removed with invalid flags \(flags)") }
                let (signedAfter, coSignedBy, coSignature) = try signatures(flags, &r)
                return .staffRemoved(
                    StaffRemoved(
                        staff: staff, removedBy: removedBy, signature: signature, signedAfter: signedAfter, coSignedBy: coSignedBy,
                        coSignature: coSignature))
            case .rosterChangeProposed:
                try allow(head, 0, "roster-change-proposed")
                guard !insideProposal else { throw DecodingFailure("roster-change-proposed inside another roster-change-proposed") }
                insideProposal = true
                defer { insideProposal = false }
                guard let change = RosterChange(try decode(&r)), change.coSignedBy == nil else {
                    throw DecodingFailure("roster-change-proposed holds no single-signed roster change")
                }
                return .rosterChangeProposed(change)
            case .transferRequested:
                try allow(head, lineageFlag | accountFlag, "transfer-requested")
                let caseId = try r.shortString()
                let lineage = try self.lineage(head, &r)
                let kind = try r.u8()
                let source = try planSource(kind & 0x7F, account: try account(head, &r))
                let target = AccountID(try r.key())
                let version = try r.varint()
                let authentication = try r.shortString()
                let evidence = try r.shortString()
                let reason = try r.shortString()
                let suffix = kind & 0x80 == 0 ? nil : try r.key()
                let plan = TransferPlan(
                    caseId: caseId, lineage: lineage, source: source, target: target, lineageVersion: version,
                    targetAuthentication: authentication, ownershipEvidence: evidence, reason: reason, formatOneLineageSuffix: suffix)
                return .transferRequested(
                    TransferRequested(plan: plan, planDigest: try r.digest(), requestedBy: try r.shortString(), signature: try r.shortBytes()))
            case .transferApproved:
                try allow(head, 0, "transfer-approved")
                return .transferApproved(
                    TransferApproved(
                        caseId: try r.shortString(), planDigest: try r.digest(), approvedBy: try r.shortString(),
                        signature: try r.shortBytes()))
            case .transferApplied:
                try allow(head, lineageFlag | accountFlag, "transfer-applied")
                let caseId = try r.shortString()
                let digest = try r.digest()
                let lineage = try self.lineage(head, &r)
                let kind = try r.u8()
                let source = try planSource(kind, account: try account(head, &r))
                return .transferApplied(
                    TransferApplied(
                        caseId: caseId, planDigest: digest, lineage: lineage, source: source, target: AccountID(try r.key()),
                        appliedBy: try r.shortString(), signature: try r.shortBytes()))
            case .transferRefused:
                try allow(head, lineageFlag, "transfer-refused")
                let (caseId, step, staff, reason) = (try r.shortString(), try r.shortString(), try r.shortString(), try r.shortString())
                let flags = try r.u8()
                guard flags & ~1 == 0 else { throw DecodingFailure("transfer-refused with invalid flags \(flags)") }
                if flags & 1 == 0 { try allow(head, 0, "transfer-refused without a lineage") }
                let lineage = flags & 1 == 0 ? nil : try self.lineage(head, &r)
                return .transferRefused(TransferRefused(caseId: caseId, step: step, staff: staff, reason: reason, lineage: lineage))
            case .decisionIssued:
                try allow(head, lineageFlag | accountFlag, "decision-issued")
                let byte = try r.u8()
                guard let reason = DecisionReason(rawValue: byte & 0x3F) else { throw DecodingFailure("unknown decision reason \(byte & 0x3F)") }
                if byte & 0x40 == 0 { try allow(head, accountFlag, "decision-issued without a lineage") }
                if byte & 0x80 == 0 { try allow(head, lineageFlag, "decision-issued without an account") }
                let lineage = byte & 0x40 == 0 ? nil : try self.lineage(head, &r)
                let account = byte & 0x80 == 0 ? nil : try self.account(head, &r)
                return .decisionIssued(DecisionIssued(reason: reason, lineage: lineage, account: account))
            case .storeUpgraded:
                try allow(head, 0, "store-upgraded")
                return .storeUpgraded(
                    StoreUpgraded(
                        fromFormat: try r.u8(), records: try r.varint(), headHash: try r.digest(), merkleRoot: try r.digest(),
                        copiedRecords: try r.varint()))
            }
        }

        mutating func pair(_ head: UInt8, _ r: inout ByteReader, _ name: String) throws(DecodingFailure) -> (LineageKey, AccountID) {
            try allow(head, lineageFlag | accountFlag, name)
            let lineage = try self.lineage(head, &r)
            return (lineage, try account(head, &r))
        }

        /// A roster change's nonce and second signature, as `flags` (4, 8) announce them.
        func signatures(_ flags: UInt8, _ r: inout ByteReader) throws(DecodingFailure) -> (UInt64?, StaffID?, [UInt8]) {
            let signedAfter = flags & 4 == 0 ? nil : try r.varint()
            guard flags & 8 != 0 else { return (signedAfter, nil, []) }
            return (signedAfter, try r.shortString(), try r.shortBytes())
        }

        func planSource(_ kind: UInt8, account: AccountID) throws(DecodingFailure) -> PlanSource {
            switch kind {
            case 1: return .bound(account)
            case 2: return .tombstoned(account)
            default: throw DecodingFailure("unknown plan source \(kind)")
            }
        }

        mutating func transaction(_ r: inout ByteReader) throws(DecodingFailure) -> TransactionFacts {
            let flags = try r.u8()
            guard let provenance = Provenance(rawValue: flags >> 2 & 3) else { throw DecodingFailure("unknown provenance in \(flags)") }
            let key = try r.key()
            let product = try self.product(flags & 0x40 != 0, &r)
            let purchase = try time(&r)
            let expires = flags & 0x10 == 0 ? nil : try offset(purchase, by: try r.zigzag())
            let revocation = flags & 0x20 == 0 ? nil : try time(&r)
            let signed = try time(&r)
            let environment: String
            if flags & 0x80 == 0 {
                let code = Int(try r.u8())
                guard code < EventCodec.environments.count else { throw DecodingFailure("unknown environment code \(code)") }
                environment = EventCodec.environments[code]
            } else {
                environment = try r.shortString()
                guard !EventCodec.environments.contains(environment) else {
                    throw DecodingFailure("environment \(environment) written out instead of coded")
                }
            }
            let ownership: Ownership
            switch flags & 3 {
            case 0: ownership = .purchased
            case 1: ownership = .familyShared
            case 2:
                let value = try r.shortString()
                ownership = Ownership(appleValue: value)
                guard case .other = ownership else { throw DecodingFailure("ownership \(value) written out instead of coded") }
            default: throw DecodingFailure("unknown ownership code 3")
            }
            if !context.sawTransaction {
                context.sawTransaction = true
                context.expires = expires
                context.purchase = purchase
            }
            return TransactionFacts(
                transactionKey: key, productId: product, purchaseDate: purchase, expiresDate: expires, revocationDate: revocation,
                ownership: ownership, environment: environment, signedDate: signed, provenance: provenance)
        }
    }
}

extension TransferPlan {
    /// The bytes whose SHA-256 is the plan digest both staff members sign: the plan's fields in order
    /// (strings with a u32 length, the version as u64) after a version label. A plan signed in
    /// storage format 1 keeps that format's label and 32-byte lineage key, so its digest still verifies.
    public var canonicalBytes: [UInt8] {
        var w = ByteWriter()
        w.string(formatOneLineageSuffix == nil ? "ownership-ledger/transfer-plan/v2" : "ownership-ledger/transfer-plan/v1")
        w.string(caseId)
        w.key(lineage.key)
        if let suffix = formatOneLineageSuffix { w.key(suffix) }
        switch source {
        case .bound(let account):
            w.u8(1)
            w.key(account.key)
        case .tombstoned(let account):
            w.u8(2)
            w.key(account.key)
        }
        w.key(target.key)
        w.u64(lineageVersion)
        w.string(targetAuthentication)
        w.string(ownershipEvidence)
        w.string(reason)
        return w.output
    }
}
