public import AppleSignedData
public import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A client for the two App Store Server API endpoints the ledger reads: **Get Notification History**
/// and **Get Transaction History** (v2). Every request carries a bearer token signed ES256 with the
/// App Store Connect key (reused until shortly before it expires). 429 is retried after `Retry-After`;
/// 5xx, network errors and Apple's "try again" error codes with bounded exponential backoff; anything
/// else fails at once with an ``AppStoreAPIError`` naming the endpoint and status. Calls block the
/// calling thread; one client may be shared by threads. See `docs/apple-api.md`.
public final class AppStoreServerAPIClient: Sendable {
    /// How failed requests are retried.
    public struct RetryPolicy: Sendable {
        /// Attempts per request, the first included.
        public var maximumAttempts: Int
        /// The wait before the first retry; it doubles with each further one, up to ``maximumDelay``.
        public var initialDelay: Double
        public var maximumDelay: Double
        /// The longest `Retry-After` honoured; a longer one ends the request with `.rateLimited`.
        public var maximumRetryAfter: Double
        /// Waits the given seconds before a retry; returns false to give up instead (a service
        /// stopping). Tests record the waits instead of sleeping.
        public var sleep: @Sendable (Double) -> Bool

        public init(
            maximumAttempts: Int = 6, initialDelay: Double = 1, maximumDelay: Double = 30, maximumRetryAfter: Double = 300,
            sleep: @escaping @Sendable (Double) -> Bool = {
                Thread.sleep(forTimeInterval: $0)
                return true
            }
        ) {
            self.maximumAttempts = max(1, maximumAttempts)
            self.initialDelay = initialDelay
            self.maximumDelay = maximumDelay
            self.maximumRetryAfter = maximumRetryAfter
            self.sleep = sleep
        }

        /// The backoff before retry number `retry` (1 for the first): initial × 2^(retry−1), capped.
        func backoff(_ retry: Int) -> Double { min(maximumDelay, initialDelay * pow(2, Double(min(retry - 1, 30)))) }
    }

    /// What the client did, for progress output and metrics.
    public enum Event: Sendable {
        /// Apple (or the network) answered one attempt: `status` nil for a network error.
        case answered(endpoint: String, status: Int?, seconds: Double)
        /// The request will be sent again after `delay` seconds.
        case retrying(endpoint: String, reason: String, delay: Double, attempt: Int)
    }

    /// The production and sandbox base URLs (Apple's "App Store Server API" overview); nil for the
    /// Xcode and LocalTesting environments, which have no server (give a base URL explicitly).
    public static func baseURL(for environment: AppleEnvironment) -> URL? {
        switch environment {
        case .production: URL(string: "https://api.storekit.itunes.apple.com")
        case .sandbox: URL(string: "https://api.storekit-sandbox.itunes.apple.com")
        default: nil
        }
    }

    public let baseURL: URL
    public let retry: RetryPolicy
    private let tokens: BearerTokens
    private let transport: HTTPTransport
    private let clock: @Sendable () -> Int64
    private let observer: (@Sendable (Event) -> Void)?

    /// A client for `baseURL` (https, or http to a loopback address only, for tests), signing for the
    /// app `bundleId`. `clock` gives milliseconds since the epoch (token times, HTTP-date `Retry-After`).
    public init(
        baseURL: URL, credentials: AppStoreConnectCredentials, bundleId: String, retry: RetryPolicy = RetryPolicy(),
        timeoutSeconds: Double = 30, clock: @escaping @Sendable () -> Int64, observer: (@Sendable (Event) -> Void)? = nil
    ) throws(AppStoreAPIError) {
        let scheme = baseURL.scheme?.lowercased()
        let host = baseURL.host?.lowercased() ?? ""
        guard scheme == "https" || (scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)), !host.isEmpty,
            baseURL.query == nil
        else {
            throw .configuration(
                "the API base URL \(baseURL.absoluteString) must be https://HOST[:PORT] (plain http only to a loopback address, for tests)")
        }
        self.baseURL = baseURL
        self.retry = retry
        self.clock = clock
        self.observer = observer
        tokens = BearerTokens(credentials: credentials, bundleId: bundleId, clock: clock)
        transport = HTTPTransport(timeoutSeconds: timeoutSeconds)
    }

    /// One page of **Get Notification History** (`POST /inApps/v1/notifications/history`): the
    /// notifications Apple attempted to send between `startDate` and `endDate` (ms since the epoch);
    /// `paginationToken` from the previous page, nil for the first.
    public func notificationHistory(startDate: Int64, endDate: Int64, paginationToken: String?) throws(AppStoreAPIError)
        -> NotificationHistoryResponse
    {
        let endpoint = "POST /inApps/v1/notifications/history"
        let body = #"{"endDate":\#(endDate),"startDate":\#(startDate)}"#
        let data = try perform(
            endpoint: endpoint, path: "/inApps/v1/notifications/history", query: paginationToken.map { [("paginationToken", $0)] } ?? [],
            body: Data(body.utf8), notFound: "not found: check the bundle id and the environment the key belongs to")
        do {
            return try NotificationHistoryResponse(jsonData: data)
        } catch {
            throw AppStoreAPIError(.rejected, endpoint: endpoint, status: 200, "the answer is not a notification history: \(error.message)")
        }
    }

    /// One page of **Get Transaction History** v2 (`GET /inApps/v2/history/{transactionId}`), only
    /// auto-renewable subscriptions, oldest first; `revision` from the previous page, nil for the
    /// first. The id goes into the request path only.
    public func transactionHistory(transactionId: String, revision: String?) throws(AppStoreAPIError) -> ReconciliationResponse {
        let endpoint = "GET /inApps/v2/history/{transactionId}"
        guard (1...32).contains(transactionId.utf8.count), transactionId.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw AppStoreAPIError(.configuration, endpoint: endpoint, "the transaction id must be 1 to 32 digits")
        }
        // Apple asks to repeat the first request's query parameters with each revision.
        var query = [("productType", "AUTO_RENEWABLE"), ("sort", "ASCENDING")]
        if let revision { query.insert(("revision", revision), at: 0) }
        let data = try perform(
            endpoint: endpoint, path: "/inApps/v2/history/\(transactionId)", query: query, body: nil,
            notFound: "unknown transaction id: Apple has no transaction \(transactionId) for this app in this environment")
        let response: ReconciliationResponse
        do {
            response = try ReconciliationResponse(jsonData: data)
        } catch {
            throw AppStoreAPIError(.rejected, endpoint: endpoint, status: 200, "the answer is not a transaction history: \(error.message)")
        }
        guard response.kind == .transactionHistory, response.hasMore != true || !(response.revision ?? "").isEmpty else {
            throw AppStoreAPIError(
                .rejected, endpoint: endpoint, status: 200, "the answer is not a transaction history with a revision for the next page")
        }
        return response
    }

    // MARK: Requests and retries

    private func perform(endpoint: String, path: String, query: [(String, String)], body: Data?, notFound: String) throws(AppStoreAPIError)
        -> Data
    {
        var components = URLComponents()
        components.scheme = baseURL.scheme
        components.host = baseURL.host
        components.port = baseURL.port
        components.percentEncodedPath = (baseURL.path.hasSuffix("/") ? String(baseURL.path.dropLast()) : baseURL.path) + path
        if !query.isEmpty { components.percentEncodedQuery = query.map { "\($0)=\(Self.percentEncoded($1))" }.joined(separator: "&") }
        guard let url = components.url else { throw AppStoreAPIError(.configuration, endpoint: endpoint, "the request URL cannot be built") }
        var attempt = 0
        while true {
            attempt += 1
            var request = URLRequest(url: url)
            request.httpMethod = body == nil ? "GET" : "POST"
            do {
                request.setValue("Bearer \(try tokens.token())", forHTTPHeaderField: "Authorization")
            } catch {
                throw AppStoreAPIError(.configuration, endpoint: endpoint, "the API token could not be signed: \(error)")
            }
            request.setValue("application/json", forHTTPHeaderField: "Accept")
            request.setValue("OwnershipLedger (App Store Server API client)", forHTTPHeaderField: "User-Agent")
            if let body {
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                request.httpBody = body
            }
            let started = DispatchTime.now()
            let response: HTTPTransport.Response
            do {
                response = try transport.send(request)
            } catch {
                observer?(.answered(endpoint: endpoint, status: nil, seconds: Self.seconds(since: started)))
                let reason = "network error: \(Self.describe(error))"
                guard attempt < retry.maximumAttempts else {
                    throw AppStoreAPIError(.unavailable, endpoint: endpoint, "\(reason) (gave up after \(attempt) attempts)")
                }
                try wait(retry.backoff(attempt), endpoint: endpoint, reason: reason, attempt: attempt)
                continue
            }
            observer?(.answered(endpoint: endpoint, status: response.status, seconds: Self.seconds(since: started)))
            let status = response.status
            if (200..<300).contains(status) { return response.body }
            let apiError = APIErrorResponse(jsonData: response.body)
            func failure(_ kind: AppStoreAPIError.Kind, _ message: String) -> AppStoreAPIError {
                let detail = apiError?.errorMessage.map { " Apple says: \($0)" } ?? ""
                return AppStoreAPIError(kind, endpoint: endpoint, status: status, errorCode: apiError?.errorCode, message + detail)
            }
            let retryable = apiError?.errorCode.map(APIErrorResponse.retryableCodes.contains) ?? false
            switch status {
            case 401:
                throw failure(
                    .authentication,
                    "Apple refused the API token: the key id, the issuer id or the private key is wrong (or the key was revoked, "
                        + "or this host's clock is off)")
            case 429:
                let header = response.headers["retry-after"]
                let delay = header.flatMap { RetryAfter.seconds($0, now: clock()) } ?? retry.backoff(attempt)
                guard attempt < retry.maximumAttempts else { throw failure(.rateLimited, "rate limited (gave up after \(attempt) attempts)") }
                guard delay <= retry.maximumRetryAfter else {
                    throw failure(
                        .rateLimited,
                        "rate limited: Apple asks to retry after \(Int(delay)) s, longer than the \(Int(retry.maximumRetryAfter)) s this client waits"
                    )
                }
                try wait(delay, endpoint: endpoint, reason: "429 rate limited" + (header.map { " (Retry-After: \($0))" } ?? ""), attempt: attempt)
            case _ where (500..<600).contains(status) || retryable:
                guard attempt < retry.maximumAttempts else {
                    throw failure(.unavailable, "Apple could not answer (gave up after \(attempt) attempts)")
                }
                try wait(retry.backoff(attempt), endpoint: endpoint, reason: "\(status)", attempt: attempt)
            case 404:
                throw failure(.notFound, notFound)
            case 300..<400:
                throw failure(.rejected, "a redirect, which this client never follows")
            default:
                throw failure(.rejected, "Apple refused the request")
            }
        }
    }

    /// Waits `delay` seconds before the next attempt; throws `.cancelled` when the policy's sleep gives up.
    private func wait(_ delay: Double, endpoint: String, reason: String, attempt: Int) throws(AppStoreAPIError) {
        observer?(.retrying(endpoint: endpoint, reason: reason, delay: delay, attempt: attempt))
        guard retry.sleep(max(0, delay)) else {
            throw AppStoreAPIError(.cancelled, endpoint: endpoint, "stopped while waiting to retry after \(reason)")
        }
    }

    private static func seconds(since start: DispatchTime) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? URLError { return "\(error.localizedDescription) (URLError \(error.code.rawValue))" }
        return "\(error)"
    }

    /// RFC 3986 unreserved characters stay; every other byte is percent-encoded.
    static func percentEncoded(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: out.unicodeScalars.append(UnicodeScalar(byte))
            default: out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
}

/// The `Retry-After` header (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
public enum RetryAfter {
    /// Seconds to wait from `now` (ms since the epoch); nil when `value` is neither form. A date in
    /// the past means 0.
    public static func seconds(_ value: String, now: Int64) -> Double? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.utf8.count <= 9, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return Double(text)
        }
        guard text.utf8.count <= 40, let date = httpDate(text) else { return nil }
        return max(0, date - Double(now) / 1000)
    }

    /// Unix seconds of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form servers send; nil
    /// for anything else.
    static func httpDate(_ text: String) -> Double? {
        let c = Array(text.utf8)
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        func number(_ range: Range<Int>) -> Int32? {
            var value: Int32 = 0
            for index in range {
                guard (0x30...0x39).contains(c[index]) else { return nil }
                value = value * 10 + Int32(c[index] - 0x30)
            }
            return value
        }
        guard c.count == 29, days.contains(String(decoding: c[0..<3], as: UTF8.self)), String(decoding: c[3..<5], as: UTF8.self) == ", ",
            c[7] == 0x20, c[11] == 0x20, c[16] == 0x20, c[19] == 0x3A, c[22] == 0x3A, String(decoding: c[25...], as: UTF8.self) == " GMT",
            let day = number(5..<7), let month = months.firstIndex(of: String(decoding: c[8..<11], as: UTF8.self)),
            let year = number(12..<16), let hour = number(17..<19), let minute = number(20..<22), let second = number(23..<25),
            (1...31).contains(day), year >= 1970, hour < 24, minute < 60, second < 61
        else { return nil }
        var fields = tm()
        fields.tm_year = year - 1900
        fields.tm_mon = Int32(month)
        fields.tm_mday = day
        fields.tm_hour = hour
        fields.tm_min = minute
        fields.tm_sec = second
        let seconds = timegm(&fields)
        guard seconds != -1, fields.tm_mday == day else { return nil }  // timegm normalises 31 Feb to March
        return Double(seconds)
    }
}
