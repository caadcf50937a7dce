import Foundation
import HTTPServer
import LedgerCrypto

/// A local stand-in for Apple's App Store Server on 127.0.0.1: Get Notification History and Get
/// Transaction History v2, paginated, serving JWS signed with the test PKI. It checks every request's
/// token as Apple would (ES256 signature with the expected key's public half, `kid`, `typ`, `iss`,
/// `aud`, `bid`, `iat`, `exp` at most an hour after `iat`) and answers 401 otherwise; it answers
/// scripted faults (429, 503, a stalled answer) at chosen request numbers.
public final class FakeAppStoreServer: @unchecked Sendable {
    /// What the server expects of tokens.
    public struct Expected: Sendable {
        public var publicKey: ES256PublicKey
        public var keyId = "TESTKEY123"
        public var issuerId = "57246542-96fe-1a63-e053-0824d011072a"
        public var bundleId = Fixtures.bundleId

        public init(publicKey: ES256PublicKey) { self.publicKey = publicKey }
    }

    /// A scripted answer in place of the real one.
    public enum Fault {
        case status(Int, headers: [(name: String, value: String)] = [], body: String = "")
        /// Holds the answer until `release()`; then answers normally.
        case stall
    }

    /// One request as received.
    public struct Logged: @unchecked Sendable {
        public var method: String
        public var path: String
        public var query: [String: String]
        public var body: [String: Any]
        public var token: String
        /// Why the token was refused; nil when it was accepted.
        public var tokenProblem: String?
        public var claims: [String: Any]
    }

    public let expected: Expected
    private let lock = NSLock()
    private var server: HTTPServer?
    private var notifications: [(signedDate: Int64, jws: String)] = []
    private var histories: [String: [String]] = [:]
    private var faults: [Int: Fault] = [:]
    private var log: [Logged] = []
    private let stallGate = DispatchSemaphore(value: 0)
    /// Items per page.
    public var pageSize = 2

    public init(expected: Expected) throws {
        self.expected = expected
        server = try HTTPServer(configuration: .init(port: 0)) { [weak self] request, responder in
            guard let self else { return responder.respond(.error(503, code: "gone", message: "gone")) }
            self.handle(request, responder)
        }
    }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server?.port ?? 0)") ?? URL(fileURLWithPath: "/") }

    /// Stops the server (releasing any stalled answer first).
    public func shutdown() {
        release()
        server?.shutdown(grace: 2)
        server = nil
    }

    /// Adds notifications Apple "attempted to send", each at its `signedDate`.
    public func add(notification jws: String, signedDate: Int64) { lock.withLock { notifications.append((signedDate, jws)) } }

    /// Sets the transaction history of `transactionId` (signed transactions, oldest first).
    public func setHistory(_ transactionId: String, _ signed: [String]) { lock.withLock { histories[transactionId] = signed } }

    /// Answers request number `number` (1 for the first this server receives) with `fault`.
    public func fault(request number: Int, _ fault: Fault) { lock.withLock { faults[number] = fault } }

    /// Drops every scripted fault not yet reached.
    public func clearFaults() { lock.withLock { faults = [:] } }

    /// Lets stalled answers go.
    public func release() { for _ in 0..<8 { stallGate.signal() } }

    public var requests: [Logged] { lock.withLock { log } }

    // MARK: Handling

    private func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        let body = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] ?? [:]
        let token = request.header("Authorization").flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil } ?? ""
        let (problem, claims) = check(token)
        let fault: Fault? = lock.withLock {
            log.append(
                Logged(
                    method: request.method, path: request.path, query: request.query, body: body, token: token, tokenProblem: problem,
                    claims: claims))
            return faults[log.count]
        }
        if problem != nil { return responder.respond(HTTPResponse(status: 401)) }
        switch fault {
        case .status(let status, let headers, let text)?:
            responder.respond(.json(status, text.isEmpty ? "{}" : text, headers: headers))
        case .stall?:
            DispatchQueue.global().async { [self] in
                stallGate.wait()
                responder.respond(answer(request))
            }
        case nil:
            responder.respond(answer(request))
        }
    }

    /// Checks a token as the App Store Server API does; returns what is wrong (nil: nothing) and its claims.
    private func check(_ token: String) -> (String?, [String: Any]) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: Data(claimBytes))) as? [String: Any]
        else { return ("not a JWS", [:]) }
        guard (try? expected.publicKey.isValidSignature(signature, for: Array("\(parts[0]).\(parts[1])".utf8))) == true else {
            return ("bad signature", claims)
        }
        let now = Int64(Date().timeIntervalSince1970)
        guard header["alg"] as? String == "ES256", header["typ"] as? String == "JWT", header["kid"] as? String == expected.keyId else {
            return ("header \(header)", claims)
        }
        guard claims["iss"] as? String == expected.issuerId, claims["aud"] as? String == "appstoreconnect-v1",
            claims["bid"] as? String == expected.bundleId
        else { return ("claims \(claims)", claims) }
        guard let iat = (claims["iat"] as? NSNumber)?.int64Value, let exp = (claims["exp"] as? NSNumber)?.int64Value,
            iat <= now + 60, exp > now, exp - iat <= 3600
        else { return ("times \(claims)", claims) }
        return (nil, claims)
    }

    private func answer(_ request: HTTPRequest) -> HTTPResponse {
        let body = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] ?? [:]
        if request.method == "POST", request.path == "/inApps/v1/notifications/history" {
            guard let start = (body["startDate"] as? NSNumber)?.int64Value, let end = (body["endDate"] as? NSNumber)?.int64Value,
                start < end
            else { return .json(400, #"{"errorCode":4000015,"errorMessage":"Invalid request start date."}"#) }
            let matching = lock.withLock { notifications.filter { start <= $0.signedDate && $0.signedDate < end }.map(\.jws) }
            let offset = request.query["paginationToken"].flatMap { Int($0.dropFirst(5)) } ?? 0
            let page = Array(matching.dropFirst(offset).prefix(pageSize))
            let more = offset + page.count < matching.count
            var object: [String: Any] = [
                "hasMore": more,
                "notificationHistory": page.map { ["signedPayload": $0, "sendAttempts": [["attemptDate": 0, "sendAttemptResult": "NO_RESPONSE"]]] },
            ]
            if more { object["paginationToken"] = "page-\(offset + page.count)" }
            return .json(200, Self.json(object))
        }
        let prefix = "/inApps/v2/history/"
        if request.method == "GET", request.path.hasPrefix(prefix) {
            let id = String(request.path.dropFirst(prefix.count))
            guard request.query["productType"] == "AUTO_RENEWABLE", request.query["sort"] == "ASCENDING" else {
                return .json(400, #"{"errorCode":4000022,"errorMessage":"Invalid request. The product type parameter is invalid."}"#)
            }
            guard let all = lock.withLock({ histories[id] }) else {
                return .json(404, #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#)
            }
            let offset = request.query["revision"].flatMap { Int($0.dropFirst(9)) } ?? 0
            let page = Array(all.dropFirst(offset).prefix(pageSize))
            let object: [String: Any] = [
                "revision": "revision-\(offset + page.count)", "hasMore": offset + page.count < all.count, "bundleId": expected.bundleId,
                "environment": "Sandbox", "signedTransactions": page,
            ]
            return .json(200, Self.json(object))
        }
        return .json(404, #"{"errorCode":4040000,"errorMessage":"no such endpoint"}"#)
    }

    static func json(_ object: [String: Any]) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }
}
