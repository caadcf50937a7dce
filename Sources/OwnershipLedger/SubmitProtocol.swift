import AppleSignedData
import Foundation
public import LedgerCore

/// The verifier line protocol of `ledger submit` (see `docs/protocol.md`): one JSON object in, one
/// JSON object out, in order. A malformed line is answered `invalid` and appends nothing.
public struct SubmitProtocol {
    public let ledger: Ledger
    /// Accept decoded `transaction`, `notification` and legacy `receipt` objects without signatures.
    public let trustDecoded: Bool
    /// The ledger clock, used when a line has no `at`.
    public let clock: @Sendable () -> Timestamp

    /// The longest accepted line.
    public static let maximumLineBytes = 1 << 20
    static let types = ["purchase", "renewal", "restore", "notification", "delete-account", "reconciliation"]
    static let allowedFields: Set<String> = [
        "type", "account", "signedTransaction", "transaction", "receipt", "signedPayload", "notification", "response", "at",
        "id",
    ]

    public init(ledger: Ledger, trustDecoded: Bool, clock: @escaping @Sendable () -> Timestamp = LedgerTime.now) {
        self.ledger = ledger
        self.trustDecoded = trustDecoded
        self.clock = clock
    }

    /// Answers one input line with one JSON line.
    public func respond(to line: String) -> String { respond(to: [line])[0] }

    /// Answers each line with one JSON line, in order. Every valid line is decided in one write
    /// transaction (group commit); an invalid line appends nothing and does not affect the others.
    public func respond(to lines: [String]) -> [String] {
        let prepared = prepare(lines)
        return answers(to: prepared, decided: ledger.submit(isolating: prepared.groups)).map(\.line)
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

    /// Lines parsed and verified, ready to be decided: ``groups`` go to the writer
    /// (``Ledger/submit(isolating:)`` or a ``GroupCommitter``), then ``answers(to:decided:)``
    /// renders the answers. Holds only JSON values, which are immutable.
    public struct PreparedLines: @unchecked Sendable {
        /// One group per valid line, in input order.
        public let groups: [(submissions: [Ledger.Submission], at: Timestamp)]
        fileprivate let lineOfGroup: [Int]
        fileprivate let invalid: [JSONObject?]
        fileprivate let ids: [Any?]
    }

    /// One answer: its JSON line, with the decision and code it carries.
    public struct Answer: Sendable {
        public let decision: String
        public let code: String
        public let line: String
    }

    /// Parses and verifies each line (the work that needs no store); an invalid line is answered
    /// at once and appends nothing. `caller`, when given, is the authenticated account.
    public func prepare(_ lines: [String], caller: AuthenticatedCaller? = nil) -> PreparedLines {
        var invalid = [JSONObject?](repeating: nil, count: lines.count)
        var ids = [Any?](repeating: nil, count: lines.count)
        var groups: [(submissions: [Ledger.Submission], at: Timestamp)] = []
        var lineOfGroup: [Int] = []
        for (index, line) in lines.enumerated() {
            do {
                let (object, id) = try parseLine(line)
                ids[index] = id
                let (submissions, at) = try parse(object, caller: caller)
                for submission in submissions { try Ledger.validate(submission, at: at) }
                groups.append((submissions, at))
                lineOfGroup.append(index)
            } catch {
                invalid[index] = self.invalid(error)
            }
        }
        return PreparedLines(groups: groups, lineOfGroup: lineOfGroup, invalid: invalid, ids: ids)
    }

    /// The answers to `prepared`'s lines, in input order, given what became of each of its groups.
    public func answers(to prepared: PreparedLines, decided: [Result<[Decision], any Error>]) -> [Answer] {
        var answers = prepared.invalid
        for ((group, line), result) in zip(zip(prepared.groups, prepared.lineOfGroup), decided) {
            switch result {
            case .success(let decisions):
                var response = decisions.count == 1 ? render(decisions[0]) : summarise(decisions)
                if case .deleteAccount = group.submissions.first { response["appleBillingContinues"] = true }
                answers[line] = response
            case .failure(let error):
                answers[line] = invalid(error)
            }
        }
        return zip(answers, prepared.ids).map { answer, id in
            var response = answer ?? invalid(ProtocolError("line was not answered", code: "internal"))
            if let id { response["id"] = id }
            return Answer(
                decision: response["decision"] as? String ?? Outcome.invalid.rawValue, code: response["code"] as? String ?? "internal",
                line: JSONLine.render(response))
        }
    }

    /// The answer to a line that could not even be read (too long, not UTF-8): `invalid`, nothing appended.
    public func invalidAnswer(_ message: String) -> String { JSONLine.render(invalid(ProtocolError(message))) }

    private func parseLine(_ line: String) throws -> (object: [String: Any], id: Any?) {
        guard line.utf8.count <= Self.maximumLineBytes else {
            throw ProtocolError("line is longer than \(Self.maximumLineBytes) bytes")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw ProtocolError("line is not a JSON object")
        }
        let id = object["id"]
        if let id, !(id is String || (id as? NSNumber).map { !Self.isBoolean($0) } == true) {
            throw ProtocolError("id must be a string or a number")
        }
        return (object, id)
    }

    /// A JSON time: an ISO-8601 string or a whole number of milliseconds, within ``LedgerTime/supportedRange``.
    static func timestamp(_ value: Any) -> Timestamp? {
        if let text = value as? String { return LedgerTime.parse(text) }
        guard let number = value as? NSNumber, !isBoolean(number) else { return nil }
        let double = number.doubleValue
        guard double.isFinite, double == double.rounded(), Double(LedgerTime.supportedRange.lowerBound) <= double,
            double <= Double(LedgerTime.supportedRange.upperBound)
        else { return nil }
        return number.int64Value
    }

    /// JSON `true` and `false` arrive as NSNumber too.
    static func isBoolean(_ number: NSNumber) -> Bool { String(cString: number.objCType) == "c" }

    private func invalid(_ error: any Error) -> JSONObject {
        var response: JSONObject = ["decision": Outcome.invalid.rawValue]
        switch error {
        case let error as ProtocolError:
            response["code"] = error.code
            response["message"] = error.message
        case let error as VerificationError:
            response["code"] = error.code.rawValue
            response["message"] = error.message
        case let error as SubmissionError:
            response["code"] = error.code
            response["message"] = error.message
        default:
            response["code"] = "internal"
            response["message"] = "the ledger could not record this line, nothing was appended: \(error)"
        }
        return response
    }

    /// The submissions a line asks for and the time of the attempt.
    func parse(_ object: [String: Any], caller: AuthenticatedCaller? = nil) throws -> ([Ledger.Submission], Timestamp) {
        if let caller, let refused = object.keys.sorted().first(where: { !caller.fields.contains($0) }) {
            let fields = caller.fields.sorted().joined(separator: ", ")
            throw ProtocolError(
                ["account", "uid", "userId"].contains(refused)
                    ? "field \(refused) is refused: the account is the authenticated caller's, and client-supplied UIDs are never read"
                    : "unknown field \(refused) (this request takes only \(fields))")
        }
        if let unknown = object.keys.sorted().first(where: { !Self.allowedFields.contains($0) }) {
            throw ProtocolError("unknown field \(unknown) (device identifiers and other extra fields are not accepted)")
        }
        guard let type = object["type"] as? String else { throw ProtocolError("type is missing or not a string") }
        let types = caller.map { caller in Self.types.filter(caller.types.contains) } ?? Self.types
        guard types.contains(type) else {
            throw ProtocolError("type \(type) is not one of \(types.joined(separator: ", "))")
        }
        let at: Timestamp
        if let value = object["at"] {
            guard let parsed = Self.timestamp(value) else {
                throw ProtocolError("at must be ISO-8601 or milliseconds since the epoch, from 1970 through 9999")
            }
            at = parsed
        } else {
            at = clock()
        }
        switch type {
        case "notification":
            return (
                [.notification(try notification(object, at: at), trustDecoded && object["notification"] != nil ? .trustedDecoded : .verifiedJWS)], at
            )
        case "delete-account":
            return ([.deleteAccount(uid: try caller?.account ?? account(object))], at)
        case "reconciliation":
            guard let response = object["response"] as? [String: Any] else {
                throw ProtocolError("response (the App Store Server API response JSON) is missing or not an object")
            }
            let parsed = try ReconciliationResponse(json: response)
            let items = try ledger.verifier.verifyReconciliation(parsed, now: at).map { try $0.get() }
            return (items.map { .transaction(.reconciliation, uid: nil, $0.transaction, .verifiedJWS) }, at)
        default:
            let kind: SubmissionKind = type == "purchase" ? .purchase : type == "renewal" ? .renewal : .restore
            let uid = try caller?.account ?? account(object)
            return (try transactions(object, at: at).map { .transaction(kind, uid: uid, $0.0, $0.1) }, at)
        }
    }

    private func account(_ object: [String: Any]) throws -> String {
        guard let uid = object["account"] as? String, !uid.isEmpty, uid.utf8.count <= 256 else {
            throw ProtocolError("account (the authenticated Firebase UID, 1–256 bytes) is missing or not a string")
        }
        return uid
    }

    private func transactions(_ object: [String: Any], at: Timestamp) throws -> [(TransactionPayload, Provenance)] {
        let given = ["signedTransaction", "transaction", "receipt"].filter { object[$0] != nil }
        guard given.count == 1 else {
            throw ProtocolError("give exactly one of signedTransaction, transaction (with --trust-decoded) or receipt (with --trust-decoded)")
        }
        switch given[0] {
        case "signedTransaction":
            guard let jws = object["signedTransaction"] as? String else { throw ProtocolError("signedTransaction must be a string") }
            return [(try ledger.verifier.verifyTransaction(jws, now: at).get(), .verifiedJWS)]
        case "transaction":
            try requireTrust("transaction")
            guard let json = object["transaction"] as? [String: Any] else { throw ProtocolError("transaction must be an object") }
            let payload = try TransactionPayload(json: json)
            try checkIdentity(bundleId: payload.bundleId, environment: payload.environment)
            return [(payload, .trustedDecoded)]
        default:
            try requireTrust("receipt")
            guard let json = object["receipt"] as? [String: Any] else { throw ProtocolError("receipt must be an object") }
            let payloads = try ledger.verifier.verifyLegacyReceipt(LegacyReceiptResponse(json: json)).get()
            return latestPerLineage(payloads).map { ($0, .legacyReceipt) }
        }
    }

    private func notification(_ object: [String: Any], at: Timestamp) throws -> NotificationPayload {
        let given = ["signedPayload", "notification"].filter { object[$0] != nil }
        guard given.count == 1 else {
            throw ProtocolError("give exactly one of signedPayload or notification (with --trust-decoded)")
        }
        if let jws = object["signedPayload"] {
            guard let jws = jws as? String else { throw ProtocolError("signedPayload must be a string") }
            return try ledger.verifier.verifyNotification(jws, now: at).get()
        }
        try requireTrust("notification")
        guard let json = object["notification"] as? [String: Any] else { throw ProtocolError("notification must be an object") }
        let payload = try NotificationPayload(json: json)
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

    /// Decoded data must still name this ledger's app and environment.
    private func checkIdentity(bundleId: String, environment: AppleEnvironment) throws {
        let configuration = ledger.configuration
        guard bundleId == configuration.bundleId else {
            throw VerificationError(.invalidAppIdentifier, "bundleId \(bundleId) is not this ledger's \(configuration.bundleId)")
        }
        guard environment == configuration.environment else {
            throw VerificationError(
                .invalidEnvironment, "environment \(environment.rawValue) is not this ledger's \(configuration.environment.rawValue)")
        }
    }

    /// A legacy receipt lists every renewal; the ledger decides on the latest of each lineage.
    private func latestPerLineage(_ payloads: [TransactionPayload]) -> [TransactionPayload] {
        var latest: [String: TransactionPayload] = [:]
        for payload in payloads {
            if let current = latest[payload.originalTransactionId],
                (current.expiresDate ?? current.purchaseDate) >= (payload.expiresDate ?? payload.purchaseDate)
            {
                continue
            }
            latest[payload.originalTransactionId] = payload
        }
        return latest.keys.sorted().compactMap { latest[$0] }
    }

    private func summarise(_ decisions: [Decision]) -> JSONObject {
        let outcomes = Set(decisions.map(\.outcome))
        var summary: JSONObject = [
            "results": decisions.map(render),
            "decision": outcomes.count == 1 ? decisions[0].outcome.rawValue : Outcome.recorded.rawValue,
            "code": outcomes.count == 1 && Set(decisions.map(\.code)).count == 1 ? decisions[0].code : "mixed",
            "message": "\(decisions.count) items decided; see results",
        ]
        if decisions.isEmpty { summary["decision"] = Outcome.ignored.rawValue; summary["code"] = "empty" }
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
public func render(_ decision: Decision) -> JSONObject {
    var object: JSONObject = ["decision": decision.outcome.rawValue, "code": decision.code, "message": decision.message]
    if let sequence = decision.sequence { object["seq"] = sequence }
    if let entitlement = decision.entitlement { object["entitlement"] = render(entitlement) }
    if decision.duplicate { object["duplicate"] = true }
    return object
}

public func render(_ entitlement: EntitlementView) -> JSONObject {
    var object: JSONObject = [
        "productId": entitlement.productId, "active": entitlement.active, "revoked": entitlement.revoked,
        "expiresAt": entitlement.expiresAt.map(LedgerTime.format) ?? NSNull(),
    ]
    if let ended = entitlement.endedBecause { object["ended"] = ended }
    return object
}

public func render(_ binding: BindingView) -> JSONObject {
    ["state": binding.state, "account": binding.uid ?? NSNull(), "entitlement": binding.entitlement.map(render) ?? NSNull()]
}

public func render(_ account: AccountView) -> JSONObject {
    ["account": account.uid, "known": account.known, "entitlements": account.entitlements.map(render)]
}
