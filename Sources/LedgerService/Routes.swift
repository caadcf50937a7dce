import FirebaseAuth
import Foundation
import HTTPServer
import LedgerCore
import OwnershipLedger
import StrictJSON

/// The service's routes: authentication, the protocol, the writer and the answers' statuses.
final class Routes: Sendable {
    enum Route: String, CaseIterable {
        case notifications = "POST /v1/apple/notifications"
        case transactions = "POST /v1/transactions"
        case entitlements = "GET /v1/entitlements"
        case account = "DELETE /v1/account"
        case submit = "POST /v1/submit"
        case health = "GET /healthz"
        case ready = "GET /readyz"
        case metrics = "GET /metrics"

        var method: String { Self.parts[index].method }
        var path: String { Self.parts[index].path }

        private var index: Int { Self.allCases.firstIndex(of: self) ?? 0 }

        /// Each route's method and path, split once, in `allCases` order (read per request: no hashing).
        private static let parts: [(method: String, path: String)] = allCases.map { route in
            (String(route.rawValue.prefix { $0 != " " }), String(route.rawValue.drop { $0 != " " }.dropFirst()))
        }

        /// The routes with this path (several methods may share one).
        static func matching(path: String) -> [Route] {
            zip(allCases, parts).compactMap { route, parts in parts.path == path ? route : nil }
        }
    }

    /// The route a request is logged under: its template when known (never the raw path of an
    /// unknown one, which the client chose).
    static func label(method: String, path: String) -> String {
        Route.matching(path: path).first { $0.method == method }?.rawValue ?? "other"
    }

    let ledger: Ledger
    let committer: GroupCommitter
    private let metrics: Metrics
    private let tokens: FirebaseTokenVerifier
    private let serviceTokens: ServiceTokens?
    /// The most seconds since the caller signed in for `DELETE /v1/account`.
    private let deletionSignInSeconds: Int64
    private let log: @Sendable (String) -> Void
    private let protocolHandler: SubmitProtocol
    private let state = State()
    /// Verifies batches off the server threads, a core's worth at a time (first come, first
    /// served), so many batches at once wait as bodies rather than all being decoded together.
    private let batches: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "ledger-batches"
        queue.maxConcurrentOperationCount = ProcessInfo.processInfo.activeProcessorCount
        return queue
    }()

    /// What changes while serving: draining, and whether the last commit reached the store.
    private final class State: @unchecked Sendable {
        private let lock = NSLock()
        private var draining = false
        private var storeFailure: String?
        var isDraining: Bool { lock.withLock { draining } }
        var failure: String? { lock.withLock { storeFailure } }
        func drain() { lock.withLock { draining = true } }
        func commit(failed: String?) { lock.withLock { storeFailure = failed } }
    }

    init(
        ledger: Ledger, committer: GroupCommitter, metrics: Metrics, tokens: FirebaseTokenVerifier, serviceTokens: ServiceTokens?,
        deletionSignInSeconds: Int64, log: @escaping @Sendable (String) -> Void
    ) {
        self.deletionSignInSeconds = deletionSignInSeconds
        self.ledger = ledger
        self.committer = committer
        self.metrics = metrics
        self.tokens = tokens
        self.serviceTokens = serviceTokens
        self.log = log
        // Signed data only: decoded facts are never accepted over the network.
        protocolHandler = SubmitProtocol(ledger: ledger, trustDecoded: false)
    }

    func startDraining() { state.drain() }

    func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        let methods = Route.matching(path: request.path)
        guard let route = methods.first else {
            return responder.respond(.error(404, code: "not-found", message: "no route \(request.method) for this path"))
        }
        guard let matched = methods.first(where: { $0.method == request.method }) else {
            return responder.respond(
                .error(
                    405, code: "method-not-allowed", message: "\(route.path) takes \(methods.map(\.method).joined(separator: ", "))",
                    headers: [("Allow", methods.map(\.method).joined(separator: ", "))]))
        }
        switch matched {
        case .health:
            responder.respond(.json(200, #"{"status":"alive"}"#))
        case .ready:
            responder.respond(readiness())
        case .metrics:
            let gauges = [
                ("ledger_commit_queue_depth", "Submissions waiting for the writer.", Double(committer.queueDepth)),
                ("ledger_commit_in_progress", "Submissions the writer is deciding and committing.", Double(committer.inProgress)),
            ]
            responder.respond(
                HTTPResponse(
                    status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")], body: Array(metrics.render(gauges: gauges).utf8)))
        case .notifications:
            do {
                let line = try RequestBodies.notificationLine(request.body)
                decide(protocolHandler.prepare([line]), responder: responder) { Self.status(of: $0, denied: 200) }
            } catch {
                responder.respond(invalidBody(error.description))
            }
        case .transactions:
            guard let account = authenticate(request, responder) else { return }
            let caller = SubmitProtocol.AuthenticatedCaller(
                account: account, types: ["purchase", "renewal", "restore"], fields: ["type", "signedTransaction"])
            decide(protocolHandler.prepare([request.body], caller: caller), responder: responder) { Self.status(of: $0, denied: 403) }
        case .account:
            // Deleting is for a user who signed in recently, not for any token refreshed since.
            guard let account = authenticate(request, responder, signedInWithin: deletionSignInSeconds) else { return }
            let caller = SubmitProtocol.AuthenticatedCaller(account: account, types: ["delete-account"], fields: ["type"])
            decide(protocolHandler.prepare([Array(#"{"type":"delete-account"}"#.utf8)], caller: caller), responder: responder) {
                Self.status(of: $0, denied: 403)
            }
        case .entitlements:
            guard let account = authenticate(request, responder) else { return }
            do {
                responder.respond(.json(200, JSONWriter.string(.object(render(try ledger.account(uid: account)))), note: "ok"))
            } catch {
                responder.respond(unavailable("the ledger could not be read: \(error)"))
            }
        case .submit:
            guard authorizeService(request, responder) else { return }
            // A batch may carry many JWS to verify: do it off the server thread.
            batches.addOperation { self.submitBatch(request.body, responder: responder) }
        }
    }

    // MARK: Authentication

    /// The account of the request's Firebase ID token, or nil after answering 401 (503 when the
    /// certificates are unavailable, 500 when libcrypto failed checking it). The token is never logged.
    /// The UID of the request's Firebase ID token, signed in at most `signedInWithin` seconds ago
    /// when given; nil once the request is answered (401, or 503 and 500 when the token could not
    /// be checked).
    private func authenticate(_ request: HTTPRequest, _ responder: HTTPResponder, signedInWithin: Int64? = nil) -> String? {
        guard let token = RequestBodies.bearerToken(request.header("Authorization")) else {
            responder.respond(refuse("missing-token", "send the Firebase ID token as Authorization: Bearer <token>"))
            return nil
        }
        switch tokens.verify(token).flatMap({ user in
            Result { () throws(TokenError) in
                if let signedInWithin { try tokens.requireSignIn(user, within: signedInWithin) }
                return user
            }
        }) {
        case .success(let user):
            return user.uid
        case .failure(let error) where error.code == .keysUnavailable:
            metrics.tokenFailure(error.code.rawValue)
            responder.respond(.error(503, code: error.code.rawValue, message: error.message, headers: [("Retry-After", "5")]))
        case .failure(let error) where error.code == .cryptoFailure:
            // The server failed, not the caller: no verdict on the token, so neither 401 nor a count.
            responder.respond(
                internalError(
                    route: Self.label(method: request.method, path: request.path), "the Firebase ID token could not be checked", error.message))
        case .failure(let error) where error.code == .requiresRecentLogin:
            // RFC 9470's step-up challenge: the token is fine, the authentication is too old.
            metrics.tokenFailure(error.code.rawValue)
            let challenge = #"Bearer error="insufficient_user_authentication", max_age="\#(signedInWithin ?? 0)""#
            responder.respond(.error(401, code: error.code.rawValue, message: error.message, headers: [("WWW-Authenticate", challenge)]))
        case .failure(let error):
            responder.respond(refuse(error.code.rawValue, error.message))
        }
        return nil
    }

    /// A `POST /v1/submit` carrying one of the service tokens (read before its body). A token that
    /// cannot be checked (libcrypto failing) is not one: the body is held to the single limit, and
    /// the route answers 500 if the body fits.
    func isServiceCall(_ request: HTTPRequest) -> Bool {
        guard request.method == "POST", request.path == Route.submit.path, let serviceTokens,
            let token = RequestBodies.bearerToken(request.header("Authorization"))
        else { return false }
        return (try? serviceTokens.accepts(token)) == true
    }

    private func authorizeService(_ request: HTTPRequest, _ responder: HTTPResponder) -> Bool {
        guard let serviceTokens else {
            responder.respond(
                refuse(
                    "service-tokens-not-configured", "POST /v1/submit is disabled: ledger serve was started without --service-token-file",
                    counted: false))
            return false
        }
        guard let token = RequestBodies.bearerToken(request.header("Authorization")) else {
            responder.respond(refuse("invalid-service-token", "send one of the service tokens as Authorization: Bearer <token>"))
            return false
        }
        do {
            guard try serviceTokens.accepts(token) else {
                responder.respond(refuse("invalid-service-token", "send one of the service tokens as Authorization: Bearer <token>"))
                return false
            }
            return true
        } catch {
            // The server failed, not the caller: 500, logged (never the token), nothing decided.
            responder.respond(internalError(route: Route.submit.rawValue, "the service token could not be checked", "\(error)"))
            return false
        }
    }

    /// 500 `internal` for a fault of the server while checking a request's credentials (`what`),
    /// logged as an `internal-error` line with `detail` (which never holds the credential).
    private func internalError(route: String, _ what: String, _ detail: String) -> HTTPResponse {
        log(JSONLine.render(["at": LedgerTime.format(LedgerTime.now()), "event": "internal-error", "route": route, "error": "\(what): \(detail)"]))
        return .error(500, code: "internal", message: "\(what) (a server fault, logged); nothing was read or decided")
    }

    /// 401 with `code`, counted as a token failure.
    private func refuse(_ code: String, _ message: String, counted: Bool = true) -> HTTPResponse {
        if counted { metrics.tokenFailure(code) }
        return .error(401, code: code, message: message, headers: [("WWW-Authenticate", #"Bearer error="invalid_token""#)])
    }

    // MARK: Deciding

    /// Sends `prepared`'s groups through the writer and answers once they are durable; a single
    /// line's answer is the body, with the status `status` gives it.
    private func decide(
        _ prepared: SubmitProtocol.PreparedLines, responder: HTTPResponder, status: @escaping @Sendable (SubmitProtocol.Answer) -> Int
    ) {
        commit(prepared, responder: responder) { answers in
            guard let answer = answers.first else { return self.unavailable("the request was not answered") }
            let code = status(answer)
            return HTTPResponse(
                status: code, headers: [("Content-Type", "application/json")] + (code == 503 ? [("Retry-After", "1")] : []),
                body: answer.bytes + [UInt8(ascii: "\n")], note: answer.code)
        }
    }

    private func submitBatch(_ body: [UInt8], responder: HTTPResponder) {
        let lines: [RequestBodies.Line]
        do {
            lines = try RequestBodies.ndjsonLines(body)
        } catch {
            return responder.respond(.error(413, code: "payload-too-large", message: error.description))
        }
        let readable = lines.compactMap { if case .bytes(let bytes) = $0 { bytes } else { nil } }
        commit(protocolHandler.prepare(readable), responder: responder) { answers in
            // The store failed for every line it was to decide (a database that is down): nothing was
            // decided, so the whole batch is to be sent again.
            if answers.contains(where: { $0.code == "internal" }), answers.allSatisfy({ $0.code == "internal" || $0.decision == "invalid" }) {
                return self.unavailable("the store could not record the batch; nothing was decided: send it again", code: "store-unavailable")
            }
            var decided = answers.makeIterator()
            var output: [UInt8] = []
            for line in lines {
                switch line {
                case .bytes: output += decided.next()?.bytes ?? []
                case .unreadable(let reason):
                    self.metrics.decision("invalid", code: "invalid-argument")
                    output += self.protocolHandler.invalidAnswer(reason)
                }
                output.append(UInt8(ascii: "\n"))
            }
            return HTTPResponse(status: 200, headers: [("Content-Type", "application/x-ndjson")], body: output, note: "lines=\(lines.count)")
        }
    }

    /// Commits `prepared` through the writer (answering at once when nothing is to be decided),
    /// then answers with `respond(answers)`. A full queue or a shutdown is 503.
    private func commit(
        _ prepared: SubmitProtocol.PreparedLines, responder: HTTPResponder,
        respond: @escaping @Sendable ([SubmitProtocol.Answer]) -> HTTPResponse
    ) {
        let finish: @Sendable ([Result<[Decision], any Error>]) -> Void = { results in
            let answers = self.protocolHandler.answers(to: prepared, decided: results)
            for answer in answers { self.metrics.decision(answer.decision, code: answer.code) }
            responder.respond(respond(answers))
        }
        guard !prepared.groups.isEmpty else { return finish([]) }
        do throws(GroupCommitter.Refusal) {
            try committer.enqueue(prepared) { results in
                let failure = results.lazy.compactMap { result -> String? in
                    guard case .failure(let error) = result, !(error is SubmissionError) else { return nil }
                    return "\(error)"
                }.first
                self.state.commit(failed: failure)
                finish(results)
            }
        } catch {
            switch error {
            case .full: responder.respond(unavailable("the ledger is busy: the writer's queue is full", code: "overloaded"))
            case .closed: responder.respond(unavailable("the server is shutting down", code: "shutting-down"))
            }
        }
    }

    // MARK: Answers

    /// The status of one decided line: 200 when decided (`denied` for denials), 400 when invalid,
    /// 503 when the store failed (nothing was written: retry).
    static func status(of answer: SubmitProtocol.Answer, denied: Int) -> Int {
        switch answer.decision {
        case "denied": denied
        case "invalid": answer.code == "internal" ? 503 : 400
        default: 200
        }
    }

    private func invalidBody(_ message: String) -> HTTPResponse {
        metrics.decision("invalid", code: "invalid-argument")
        return .json(
            400, JSONWriter.string(["decision": "invalid", "code": "invalid-argument", "message": .string(message)]), note: "invalid-argument")
    }

    private func unavailable(_ message: String, code: String = "unavailable") -> HTTPResponse {
        .error(503, code: code, message: message, headers: [("Retry-After", "1")])
    }

    /// Ready when not shutting down, the store answers a read, its directory is writable and the
    /// last commit did not fail in the store.
    private func readiness() -> HTTPResponse {
        if state.isDraining { return unavailable("shutting down", code: "shutting-down") }
        do {
            _ = try ledger.store.head()
        } catch {
            return unavailable("the store cannot be read: \(error)", code: "store-unreadable")
        }
        if case .directory(let directory, _) = ledger.store.location, access(directory.path, W_OK) != 0 {
            return unavailable("the store directory is not writable", code: "store-read-only")
        }
        if let failure = state.failure { return unavailable("the last commit failed: \(failure)", code: "store-failing") }
        return .json(200, #"{"status":"ready"}"#)
    }
}
