import AppleSignedData
import Foundation
public import LedgerCore
public import StrictJSON

/// The verifier line protocol of `ledger submit` (see `docs/protocol.md`): one JSON object in, one
/// JSON object out, in order. A malformed line is answered `invalid` and appends nothing.
public struct SubmitProtocol: Sendable {
    public let ledger: Ledger
    /// Accept decoded `transaction`, `notification` and legacy `receipt` objects without signatures.
    public let trustDecoded: Bool
    /// The ledger clock, used when a line has no `at`.
    public let clock: @Sendable () -> Timestamp

    /// The longest accepted line.
    public static let maximumLineBytes = 1 << 20
    /// The deepest accepted nesting of arrays and objects in a line.
    public static let maximumDepth = 32
    static let reader = JSONReader(maximumDepth: maximumDepth, maximumBytes: maximumLineBytes)
    static let types = ["purchase", "renewal", "restore", "notification", "delete-account", "reconciliation"]
    static let allowedFields = [
        "type", "account", "signedTransaction", "transaction", "receipt", "signedPayload", "notification", "response", "at", "id",
    ]
    /// The fields a line of each type may carry (a field of another type makes the line invalid).
    static func fields(of type: String) -> [String] {
        switch type {
        case "notification": notificationFields
        case "delete-account": deletionFields
        case "reconciliation": reconciliationFields
        default: transactionFields
        }
    }
    private static let notificationFields = ["type", "signedPayload", "notification", "at", "id"]
    private static let deletionFields = ["type", "account", "at", "id"]
    private static let reconciliationFields = ["type", "response", "at", "id"]
    private static let transactionFields = ["type", "account", "signedTransaction", "transaction", "receipt", "at", "id"]

    public init(ledger: Ledger, trustDecoded: Bool, clock: @escaping @Sendable () -> Timestamp = LedgerTime.now) {
        self.ledger = ledger
        self.trustDecoded = trustDecoded
        self.clock = clock
    }

    /// Answers one input line with one JSON line.
    public func respond(to line: String) -> String { respond(to: [line.utf8])[0].line }

    /// Answers each line (its UTF-8 bytes, without the line break) with one JSON line, in order.
    /// Every valid line is decided in one write transaction (group commit); an invalid line appends
    /// nothing and does not affect the others.
    public func respond<Line: Collection<UInt8> & Sendable>(to lines: [Line]) -> [Answer] {
        let prepared = prepare(lines)
        return answers(to: prepared, decided: decide(prepared))
    }

    /// Decides `prepared`'s groups in one commit (each group alone when that fails), with the keys
    /// computed when they were prepared (``Ledger/submit(isolating:)`` would compute them again).
    public func decide(_ prepared: PreparedLines) -> [Result<[Decision], any Error>] {
        ledger.submit(isolating: prepared.keyed.map { .success($0) })
    }

    /// A caller the transport has authenticated as one account (`ledger serve`'s app routes): the
    /// account is `account`, whatever the line says. A line with any field outside `fields` (an
    /// `account` among them: client-supplied UIDs are never read) or a type outside `types` is invalid.
    public struct AuthenticatedCaller: Sendable {
        public var account: String
        public var types: Set<String>
        public var fields: Set<String>

        public init(account: String, types: Set<String>, fields: Set<String>) {
            self.account = account
            self.types = types
            self.fields = fields
        }
    }

    /// Lines parsed, verified and keyed, ready to be decided (``decide(_:)``, or a ``GroupCommitter``),
    /// then ``answers(to:decided:)`` renders the answers.
    public struct PreparedLines: Sendable {
        /// One group per valid line, in input order.
        public let groups: [(submissions: [Ledger.Submission], at: Timestamp)]
        /// ``groups`` validated and keyed (``Ledger/PreparedGroup``) on the threads that parsed them,
        /// for ``GroupCommitter/enqueue(_:waitingForRoom:completion:)-(PreparedLines,_,_)``.
        let keyed: [Ledger.PreparedGroup]
        fileprivate let lineOfGroup: [Int]
        fileprivate let invalid: [JSONMembers?]
        fileprivate let ids: [JSONValue?]
    }

    /// One answer: its JSON line (UTF-8, no line break), with the decision and code it carries.
    public struct Answer: Sendable {
        public let decision: String
        public let code: String
        public let message: String
        public let bytes: [UInt8]
        /// ``bytes`` as a string.
        public var line: String { String(decoding: bytes, as: UTF8.self) }

        /// The answer `response` (with `id` added) renders.
        init(_ response: JSONMembers, id: JSONValue?) {
            var response = response
            if let id { response["id"] = id }
            decision = response["decision"]?.string ?? Outcome.invalid.rawValue
            code = response["code"]?.string ?? "internal"
            message = response["message"]?.string ?? ""
            bytes = JSONWriter.render(.object(response))
        }

        /// The answer to a line decided once: byte for byte what ``render(_:)`` of `decision` (with
        /// `appleBillingContinues` and `id` added) renders, written key by key in sorted order without
        /// building the object, since every line `ledger submit` decides is answered this way.
        init(_ decision: Decision, appleBillingContinues: Bool, id: JSONValue?) {
            self.decision = decision.outcome.rawValue
            code = decision.code
            message = decision.message
            var output: [UInt8] = []
            output.reserveCapacity(256)
            JSONWriter.append(appleBillingContinues ? "{\"appleBillingContinues\":true,\"code\":" : "{\"code\":", to: &output)
            JSONWriter.writeString(code, into: &output)
            JSONWriter.append(",\"decision\":", to: &output)
            JSONWriter.writeString(self.decision, into: &output)
            if decision.duplicate { JSONWriter.append(",\"duplicate\":true", to: &output) }
            if let entitlement = decision.entitlement {
                JSONWriter.append(entitlement.active ? ",\"entitlement\":{\"active\":true" : ",\"entitlement\":{\"active\":false", to: &output)
                if let ended = entitlement.endedBecause {
                    JSONWriter.append(",\"ended\":", to: &output)
                    JSONWriter.writeString(ended, into: &output)
                }
                JSONWriter.append(",\"expiresAt\":", to: &output)
                if let expiresAt = entitlement.expiresAt {
                    JSONWriter.writeString(LedgerTime.format(expiresAt), into: &output)
                } else {
                    JSONWriter.append("null", to: &output)
                }
                JSONWriter.append(",\"productId\":", to: &output)
                JSONWriter.writeString(entitlement.productId, into: &output)
                JSONWriter.append(entitlement.revoked ? ",\"revoked\":true}" : ",\"revoked\":false}", to: &output)
            }
            if let id {
                JSONWriter.append(",\"id\":", to: &output)
                JSONWriter.write(id, into: &output)
            }
            JSONWriter.append(",\"message\":", to: &output)
            JSONWriter.writeString(message, into: &output)
            if let sequence = decision.sequence {
                JSONWriter.append(",\"seq\":", to: &output)
                JSONWriter.writeInteger(Int64(sequence), into: &output)
            }
            output.append(UInt8(ascii: "}"))
            bytes = output
        }
    }

    /// Parses and verifies each line (its UTF-8 bytes; the work that needs no store); an invalid
    /// line is answered at once and appends nothing. `caller`, when given, is the authenticated account.
    /// Lines without `at` take the ledger clock as read once for all of `lines`. With `threads` above
    /// 1, a large batch is split into that many runs of consecutive lines, verified at once on as many
    /// threads (signature checks dominate signed lines); the result is the same.
    public func prepare<Line: Collection<UInt8> & Sendable>(_ lines: [Line], caller: AuthenticatedCaller? = nil, threads: Int = 1) -> PreparedLines {
        let now = clock()
        let parts = max(1, min(threads, lines.count / Self.linesPerThread))
        guard parts > 1 else { return prepare(lines[...], caller: caller, now: now) }
        let size = (lines.count + parts - 1) / parts
        let slices = stride(from: 0, to: lines.count, by: size).map { lines[$0..<min($0 + size, lines.count)] }
        var prepared = [PreparedLines](repeating: PreparedLines(groups: [], keyed: [], lineOfGroup: [], invalid: [], ids: []), count: slices.count)
        prepared.withUnsafeMutableBufferPointer { buffer in
            // Each iteration writes its own element only.
            nonisolated(unsafe) let results = buffer
            DispatchQueue.concurrentPerform(iterations: slices.count) { results[$0] = prepare(slices[$0], caller: caller, now: now) }
        }
        return PreparedLines(
            groups: prepared.flatMap(\.groups), keyed: prepared.flatMap(\.keyed),
            lineOfGroup: zip(slices, prepared).flatMap { slice, part in part.lineOfGroup.map { $0 + slice.startIndex } },
            invalid: prepared.flatMap(\.invalid), ids: prepared.flatMap(\.ids))
    }

    /// The fewest lines worth a thread of their own in ``prepare(_:caller:threads:)``.
    static let linesPerThread = 64

    private func prepare<Line: Collection<UInt8>>(_ lines: ArraySlice<Line>, caller: AuthenticatedCaller?, now: Timestamp) -> PreparedLines {
        var invalid = [JSONMembers?](repeating: nil, count: lines.count)
        var ids = [JSONValue?](repeating: nil, count: lines.count)
        var groups: [(submissions: [Ledger.Submission], at: Timestamp)] = []
        var keyed: [Ledger.PreparedGroup] = []
        var lineOfGroup: [Int] = []
        for (index, line) in lines.enumerated() {
            do {
                let object = try parseLine(line)
                ids[index] = object["id"]?.value
                let (submissions, at) = try parse(object, caller: caller, now: now)
                // Validated and keyed here, on this thread, not on the thread that queues the groups.
                keyed.append(try ledger.prepare((submissions, at)))
                groups.append((submissions, at))
                lineOfGroup.append(index)
            } catch {
                invalid[index] = self.invalid(error)
            }
        }
        return PreparedLines(groups: groups, keyed: keyed, lineOfGroup: lineOfGroup, invalid: invalid, ids: ids)
    }

    /// The answers to `prepared`'s lines, in input order, given what became of each of its groups.
    public func answers(to prepared: PreparedLines, decided: [Result<[Decision], any Error>]) -> [Answer] {
        var answers = [Answer?](repeating: nil, count: prepared.invalid.count)
        for ((group, line), result) in zip(zip(prepared.groups, prepared.lineOfGroup), decided) {
            let deletion = !group.submissions.isEmpty && group.submissions[0].isAccountDeletion
            switch result {
            case .success(let decisions) where decisions.count == 1:
                answers[line] = Answer(decisions[0], appleBillingContinues: deletion, id: prepared.ids[line])
            case .success(let decisions):
                var response = summarise(decisions)
                if deletion { response["appleBillingContinues"] = true }
                answers[line] = Answer(response, id: prepared.ids[line])
            case .failure(let error):
                answers[line] = Answer(invalid(error), id: prepared.ids[line])
            }
        }
        return answers.indices.map { line in
            answers[line]
                ?? Answer(prepared.invalid[line] ?? invalid(ProtocolError("line was not answered", code: "internal")), id: prepared.ids[line])
        }
    }

    /// The field of a line that carries a JWS: `signedTransaction` (purchase, renewal, restore) or
    /// `signedPayload` (notification).
    public enum SignedField: String, Sendable, CaseIterable {
        case signedTransaction, signedPayload
    }

    /// What `ledger submit` would answer about `jws` carried in `field` at `at`, short of deciding it:
    /// nil when the line would go on to be decided, else its `invalid` answer. It runs ``prepare(_:caller:)``
    /// on that very line, so `ledger inspect-jws` and `submit` cannot disagree: the same verification,
    /// decoding and submission checks, the same code and message.
    public func check(signed jws: String, in field: SignedField, at: Timestamp) -> Answer? {
        var line: JSONMembers = ["at": .integer(at), field.rawValue: .string(jws)]
        switch field {
        case .signedTransaction:
            line["type"] = "purchase"
            line["account"] = "inspect-jws"
        case .signedPayload:
            line["type"] = "notification"
        }
        let prepared = prepare([JSONWriter.render(.object(line))])
        return prepared.groups.isEmpty ? answers(to: prepared, decided: []).first : nil
    }

    /// The answer to a line that could not even be read (too long): `invalid`, nothing appended.
    public func invalidAnswer(_ message: String) -> [UInt8] { JSONWriter.render(.object(invalid(ProtocolError(message)))) }

    /// A line whose only characters are spaces and tabs gets no answer.
    public static func isBlank(_ line: some Collection<UInt8>) -> Bool {
        line.allSatisfy { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
    }

    /// The line's object, read in place (no tree of values is built).
    private func parseLine(_ line: some Collection<UInt8>) throws -> JSONView {
        let object: JSONView
        do {
            object = try Self.reader.document(line).root
        } catch {
            throw ProtocolError("line is not a valid JSON object: \(error.message)")
        }
        guard object.isObject else { throw ProtocolError("line is not a valid JSON object: the JSON value is \(object.kind), not an object") }
        switch object["id"]?.value {
        case nil, .string, .integer: return object
        default:
            // A number beyond Int64, with a fraction or an exponent is read as a Double, which could not be echoed as given.
            throw ProtocolError(
                "id must be a string or an integer from -9223372036854775808 through 9223372036854775807 (send other ids as strings)")
        }
    }

    /// A JSON time: an ISO-8601 string or a whole number of milliseconds, within ``LedgerTime/supportedRange``.
    static func timestamp(_ value: JSONValue) throws -> Timestamp {
        switch value {
        case .string(let text):
            if let time = LedgerTime.parse(text) { return time }
        case .integer(let time):
            if LedgerTime.supportedRange.contains(time) { return time }
        case .number(let number) where !JSONValue.isBeyondInt64(number):
            throw ProtocolError(JSONValue.millisecondsRequired("at"))
        default: break
        }
        throw ProtocolError("at must be ISO-8601 or a whole number of milliseconds since the epoch, from 1970 through 9999")
    }

    private func invalid(_ error: any Error) -> JSONMembers {
        let (code, message): (String, String)
        switch error {
        case let error as ProtocolError: (code, message) = (error.code, error.message)
        case let error as VerificationError: (code, message) = (error.code.rawValue, error.message)
        case let error as SubmissionError: (code, message) = (error.code, error.message)
        default: (code, message) = ("internal", "the ledger could not record this line, nothing was appended: \(error)")
        }
        return ["decision": .string(Outcome.invalid.rawValue), "code": .string(code), "message": .string(message)]
    }

    /// The submissions a line asks for and the time of the attempt.
    func parse(_ object: JSONView, caller: AuthenticatedCaller? = nil, now: Timestamp) throws -> ([Ledger.Submission], Timestamp) {
        let type: String
        if caller == nil, let given = object["type"]?.string, Self.types.contains(where: { JSONBytes.equal($0, given) }),
            Self.firstKey(of: object, outside: Self.fields(of: given)) == nil
        {
            type = given  // nearly every line: a known type whose fields are all its own passes every check
        } else {
            type = try checkedType(of: object, caller: caller)
        }
        let at = try object["at"].map { try Self.timestamp($0.value) } ?? now
        switch type {
        case "notification":
            let provenance: Provenance = trustDecoded && object["notification"] != nil ? .trustedDecoded : .verifiedJWS
            return ([.notification(try notification(object, at: at), provenance)], at)
        case "delete-account":
            return ([.deleteAccount(uid: try caller?.account ?? account(object))], at)
        case "reconciliation":
            guard let response = object["response"], response.isObject else {
                throw ProtocolError("response (the App Store Server API response JSON) is missing or not an object")
            }
            let parsed = try ReconciliationResponse(view: response)
            return (try ledger.reconciliationSubmissions(parsed, at: at).map { try $0.get() }, at)
        default:
            let kind: SubmissionKind = type == "purchase" ? .purchase : type == "renewal" ? .renewal : .restore
            let uid = try caller?.account ?? account(object)
            return (try transactions(object, at: at).map { .transaction(kind, uid: uid, $0.0, $0.1) }, at)
        }
    }

    /// The line's type, after checking its fields in order: those the caller may send, those any line
    /// may carry, a known type, the fields of that type. Throws the first check that fails.
    private func checkedType(of object: JSONView, caller: AuthenticatedCaller?) throws -> String {
        if let caller, let refused = Self.firstKey(of: object, outside: caller.fields.sorted()) {
            let fields = caller.fields.sorted().joined(separator: ", ")
            throw ProtocolError(
                ["account", "uid", "userId"].contains(where: { JSONBytes.equal($0, refused) })
                    ? "field \(refused) is refused: the account is the authenticated caller's, and client-supplied UIDs are never read"
                    : "unknown field \(refused) (this request takes only \(fields))")
        }
        if let unknown = Self.firstKey(of: object, outside: Self.allowedFields) {
            throw ProtocolError("unknown field \(unknown) (device identifiers and other extra fields are not accepted)")
        }
        guard let type = object["type"]?.string else { throw ProtocolError("type is missing or not a string") }
        let types = caller.map { caller in Self.types.filter(caller.types.contains) } ?? Self.types
        guard types.contains(where: { JSONBytes.equal($0, type) }) else {
            throw ProtocolError("type \(type) is not one of \(types.joined(separator: ", "))")
        }
        if let foreign = Self.firstKey(of: object, outside: Self.fields(of: type)) {
            throw ProtocolError("field \(foreign) does not belong to a \(type) line (it takes \(Self.fields(of: type).joined(separator: ", ")))")
        }
        return type
    }

    /// The first key of `object` (in byte order) that is not one of `allowed` (compared byte for byte).
    static func firstKey(of object: JSONView, outside allowed: [String]) -> String? {
        // Keys compared in place: a line's keys are checked on every line, and nearly always all allowed.
        var first: [UInt8]?
        object.forEachMember { key, _ in
            guard !allowed.contains(where: { JSONBytes.equal($0, key) }) else { return }
            if first.map({ key.lexicographicallyPrecedes($0) }) ?? true { first = Array(key) }
        }
        return first.map { String(decoding: $0, as: UTF8.self) }
    }

    private func account(_ object: JSONView) throws -> String {
        guard let uid = object["account"]?.string, !uid.isEmpty, uid.utf8.count <= FirebaseUID.maximumBytes else {
            throw ProtocolError("account (the authenticated Firebase UID, 1–\(FirebaseUID.maximumBytes) bytes) is missing or not a string")
        }
        if let problem = FirebaseUID.problem(uid) { throw ProtocolError("account \(problem)") }
        return uid
    }

    /// The one field of `names` the line gives, or an error naming them.
    private func exactlyOne(of names: [String], in object: JSONView, _ message: String) throws -> (name: String, value: JSONView) {
        let given = names.compactMap { name in object[name].map { (name, $0) } }
        guard given.count == 1 else { throw ProtocolError(message) }
        return given[0]
    }

    private func transactions(_ object: JSONView, at: Timestamp) throws -> [(TransactionPayload, Provenance)] {
        let (name, value) = try exactlyOne(
            of: ["signedTransaction", "transaction", "receipt"], in: object,
            "give exactly one of signedTransaction, transaction (with --trust-decoded) or receipt (with --trust-decoded)")
        switch name {
        case "signedTransaction":
            guard let jws = value.string else { throw ProtocolError("signedTransaction must be a string") }
            return [(try ledger.verifier.verifyTransaction(jws, now: at).get(), .verifiedJWS)]
        case "transaction":
            try requireTrust("transaction")
            guard value.isObject else { throw ProtocolError("transaction must be an object") }
            let payload = try TransactionPayload(view: value)
            try checkIdentity(bundleId: payload.bundleId, environment: payload.environment)
            return [(payload, .trustedDecoded)]
        default:
            try requireTrust("receipt")
            guard value.isObject else { throw ProtocolError("receipt must be an object") }
            let payloads = try ledger.verifier.verifyLegacyReceipt(LegacyReceiptResponse(view: value)).get()
            return latestPerLineage(payloads).map { ($0, .legacyReceipt) }
        }
    }

    private func notification(_ object: JSONView, at: Timestamp) throws -> NotificationPayload {
        let (name, value) = try exactlyOne(
            of: ["signedPayload", "notification"], in: object, "give exactly one of signedPayload or notification (with --trust-decoded)")
        if name == "signedPayload" {
            guard let jws = value.string else { throw ProtocolError("signedPayload must be a string") }
            return try ledger.verifier.verifyNotification(jws, now: at).get()
        }
        try requireTrust("notification")
        guard value.isObject else { throw ProtocolError("notification must be an object") }
        let payload = try NotificationPayload(view: value)
        if let bundleId = payload.bundleId, let environment = payload.environment {
            try checkIdentity(bundleId: bundleId, environment: environment)
        }
        if let transaction = payload.transaction {
            try checkIdentity(bundleId: transaction.bundleId, environment: transaction.environment)
        }
        return payload
    }

    private func requireTrust(_ field: String) throws {
        guard trustDecoded else {
            throw ProtocolError(
                "\(field) carries unsigned data and is accepted only when `ledger submit` runs with --trust-decoded; send the signed JWS instead",
                code: "verification-failed")
        }
    }

    /// Decoded data must still name this ledger's app and environment (compared byte for byte).
    private func checkIdentity(bundleId: String, environment: AppleEnvironment) throws {
        let configuration = ledger.configuration
        guard JSONBytes.equal(bundleId, configuration.bundleId) else {
            throw VerificationError(.invalidAppIdentifier, "bundleId \(bundleId) is not this ledger's \(configuration.bundleId)")
        }
        guard environment == configuration.environment else {
            throw VerificationError(
                .invalidEnvironment, "environment \(environment.rawValue) is not this ledger's \(configuration.environment.rawValue)")
        }
    }

    /// A legacy receipt lists every renewal; the ledger decides on the latest of each lineage: an
    /// entry not upgraded before an upgraded one (whose subscription another entry now grants), then
    /// the latest purchase, then the latest expiry.
    private func latestPerLineage(_ payloads: [TransactionPayload]) -> [TransactionPayload] {
        func rank(_ p: TransactionPayload) -> (Int, Int64, Int64) {
            (p.isUpgraded == true ? 0 : 1, p.purchaseDate, p.expiresDate ?? p.purchaseDate)
        }
        var latest: [String: TransactionPayload] = [:]
        for payload in payloads {
            if let current = latest[payload.originalTransactionId], rank(current) >= rank(payload) { continue }
            latest[payload.originalTransactionId] = payload
        }
        return latest.keys.sorted().compactMap { latest[$0] }
    }

    private func summarise(_ decisions: [Decision]) -> JSONMembers {
        let outcomes = Set(decisions.map(\.outcome))
        var summary: JSONMembers = [
            "results": .array(decisions.map { .object(render($0)) }),
            "decision": .string(outcomes.count == 1 ? decisions[0].outcome.rawValue : Outcome.recorded.rawValue),
            "code": .string(outcomes.count == 1 && Set(decisions.map(\.code)).count == 1 ? decisions[0].code : "mixed"),
            "message": .string("\(decisions.count) items decided; see results"),
        ]
        if decisions.isEmpty {
            summary["decision"] = .string(Outcome.ignored.rawValue)
            summary["code"] = "empty"
        }
        return summary
    }
}

/// A line the protocol cannot accept.
struct ProtocolError: Error {
    var message: String
    var code: String
    init(_ message: String, code: String = "invalid-argument") {
        self.message = message
        self.code = code
    }
}

/// JSON renderings shared by the protocol and the query commands.
public func render(_ decision: Decision) -> JSONMembers {
    var object: JSONMembers = [
        "decision": .string(decision.outcome.rawValue), "code": .string(decision.code), "message": .string(decision.message),
    ]
    if let sequence = decision.sequence { object["seq"] = .integer(Int64(sequence)) }
    if let entitlement = decision.entitlement { object["entitlement"] = .object(render(entitlement)) }
    if decision.duplicate { object["duplicate"] = true }
    return object
}

public func render(_ entitlement: EntitlementView) -> JSONMembers {
    var object: JSONMembers = [
        "productId": .string(entitlement.productId), "active": .bool(entitlement.active), "revoked": .bool(entitlement.revoked),
        "expiresAt": entitlement.expiresAt.map { .string(LedgerTime.format($0)) } ?? .null,
    ]
    if let ended = entitlement.endedBecause { object["ended"] = .string(ended) }
    return object
}

public func render(_ binding: BindingView) -> JSONMembers {
    [
        "state": .string(binding.state), "account": binding.uid.map { .string($0) } ?? .null,
        "entitlement": binding.entitlement.map { .object(render($0)) } ?? .null,
    ]
}

public func render(_ account: AccountView) -> JSONMembers {
    ["account": .string(account.uid), "known": .bool(account.known), "entitlements": .array(account.entitlements.map { .object(render($0)) })]
}
