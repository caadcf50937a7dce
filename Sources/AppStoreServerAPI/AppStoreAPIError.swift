/// Why a call to the App Store Server API failed, in words an operator can act on.
public struct AppStoreAPIError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// The private key file or an option is unusable (mode, format, URL); nothing was sent.
        case configuration
        /// 401: Apple refused the token: wrong key id, issuer id or key (or the host's clock is off).
        case authentication
        /// 404: Apple knows no such transaction (or app) in this environment.
        case notFound
        /// 429 still answered after the retries, or a `Retry-After` longer than the client waits.
        case rateLimited
        /// 5xx or network errors still after the retries.
        case unavailable
        /// Any other answer: a 4xx Apple explains with an error code, a redirect, an unreadable body.
        case rejected
        /// The caller gave up while waiting to retry (``AppStoreServerAPIClient/RetryPolicy/sleep``).
        case cancelled
    }

    public var kind: Kind
    /// `METHOD /path` of the endpoint (no query string, no identifiers beyond the path given).
    public var endpoint: String
    /// The last HTTP status, when Apple answered.
    public var status: Int?
    /// Apple's numeric `errorCode` from the error body, when it sent one (e.g. 4040010).
    public var errorCode: Int64?
    public var message: String

    public init(_ kind: Kind, endpoint: String, status: Int? = nil, errorCode: Int64? = nil, _ message: String) {
        self.kind = kind
        self.endpoint = endpoint
        self.status = status
        self.errorCode = errorCode
        self.message = message
    }

    public var description: String {
        var prefix = endpoint.isEmpty ? "" : endpoint
        if let status { prefix += prefix.isEmpty ? "HTTP \(status)" : " answered \(status)" }
        if let errorCode { prefix += " (Apple errorCode \(errorCode))" }
        return prefix.isEmpty ? message : "\(prefix): \(message)"
    }

    static func configuration(_ message: String) -> AppStoreAPIError { AppStoreAPIError(.configuration, endpoint: "", message) }
}
