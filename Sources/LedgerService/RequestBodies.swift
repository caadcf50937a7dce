import Foundation
import OwnershipLedger
import StrictJSON

/// The parts of a request the service reads itself, before `SubmitProtocol` (which parses the
/// protocol lines): the bearer token, Apple's notification body and NDJSON batches.
public enum RequestBodies {
    /// The most lines one `POST /v1/submit` may carry.
    public static let maximumBatchLines = 1_000

    /// The token of an `Authorization: Bearer <token>` header (scheme in any case, spaces around
    /// and between them); nil for any other form.
    public static func bearerToken(_ authorization: String?) -> String? {
        guard var header = authorization else { return nil }
        // On the header's UTF-8 bytes in place (this runs on every app request).
        return header.withUTF8 { bytes -> String? in
            let space = UInt8(ascii: " ")
            var start = bytes.startIndex
            var end = bytes.endIndex
            while start < end && bytes[start] == space { start += 1 }
            while end > start && bytes[end - 1] == space { end -= 1 }
            let scheme = "bearer".utf8
            // ASCII letters only: setting bit 0x20 lowers them (and maps no other byte onto one).
            guard end - start > scheme.count + 1, zip(bytes[start...], scheme).allSatisfy({ ($0 | 0x20) == $1 }),
                bytes[start + scheme.count] == space
            else { return nil }
            var token = start + scheme.count
            while bytes[token] == space { token += 1 }  // stops before `end`: the last byte is not a space
            let value = UnsafeBufferPointer(rebasing: bytes[token..<end])
            guard !value.contains(space) else { return nil }
            return String(decoding: value, as: UTF8.self)
        }
    }

    /// Apple's `responseBodyV2` (`{"signedPayload": "<JWS>"}`, nothing else, read strictly) as a
    /// protocol line.
    /// - Throws: a message naming what is wrong.
    public static func notificationLine(_ body: [UInt8]) throws(BodyError) -> [UInt8] {
        let object: JSONMembers
        do {
            object = try JSONReader(maximumDepth: 2, maximumBytes: SubmitProtocol.maximumLineBytes).object(body)
        } catch {
            throw BodyError("the body is not a JSON object (Apple sends {\"signedPayload\": \"<JWS>\"}): \(error.message)")
        }
        if let other = object.keys.first(where: { !JSONBytes.equal($0, "signedPayload") }) {
            throw BodyError("unknown field \(other): a notification body holds only signedPayload")
        }
        guard let payload = object["signedPayload"]?.string else { throw BodyError("signedPayload is missing or not a string") }
        return JSONWriter.render(["type": "notification", "signedPayload": .string(payload)])
    }

    /// One line of an NDJSON body: its bytes, or why it cannot be read.
    public enum Line: Equatable, Sendable {
        case bytes(ArraySlice<UInt8>)
        case unreadable(String)
    }

    /// The lines of an NDJSON body as `ledger submit` reads them: split on LF, a CR before it
    /// dropped, blank lines skipped, lines over ``SubmitProtocol/maximumLineBytes`` unreadable.
    /// - Throws: when the body has more than ``maximumBatchLines`` lines.
    public static func ndjsonLines(_ body: [UInt8]) throws(BodyError) -> [Line] {
        var lines: [Line] = []
        for raw in body.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            let bytes = raw.last == UInt8(ascii: "\r") ? raw.dropLast() : raw
            guard !SubmitProtocol.isBlank(bytes) else { continue }
            guard lines.count < maximumBatchLines else { throw BodyError("the batch has more than \(maximumBatchLines) lines") }
            lines.append(
                bytes.count > SubmitProtocol.maximumLineBytes
                    ? .unreadable("line is longer than \(SubmitProtocol.maximumLineBytes) bytes") : .bytes(bytes))
        }
        return lines
    }
}

/// A request body the service refuses (400), with the reason.
public struct BodyError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
