import Foundation
import LedgerTestSupport
import Testing

@testable import LedgerCrypto

/// Base64 and base64url without Foundation: the same bytes as Foundation for every input, and one
/// spelling per byte string.
@Suite struct Base64Tests {
    @Test func encodesAndDecodesLikeFoundation() {
        var rng = SeededGenerator(state: 64)
        for length in Array(0..<70) + [1000, 4096] {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let foundation = Data(bytes).base64EncodedString()
            #expect(Base64.encode(bytes) == foundation)
            #expect(Base64.decode(foundation) == bytes)
            let url = foundation.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.encode(bytes) == url)
            #expect(Base64URL.decode(url) == bytes)
        }
    }

    @Test(arguments: [
        "QQ===", "QQ=", "QQ", "QQ==QQ==", "Q===", "QR==", "QUI=A", " QQ==", "QQ==\n", "QQ ==", "Q-==", "Q_==", "QUJD=", "=", "====",
    ])
    func standardBase64HasOneSpelling(_ text: String) {
        #expect(Base64.decode(text) == nil, "\(text) is accepted")
    }

    @Test func extraPaddingAfterACertificateIsRefused() {
        let der = Data((0..<300).map { UInt8($0 & 0xFF) })
        let text = der.base64EncodedString()
        #expect(Base64.decode(text) == [UInt8](der))
        // Foundation's Data(base64Encoded:) tolerates this; x5c must not.
        #expect(Data(base64Encoded: text + "==") == der)
        #expect(Base64.decode(text + "==") == nil)
        #expect(Base64.decode(text + "=") == nil)
    }

    @Test(arguments: ["QQ=", "QQ==", "QR", "Q", "QUJDR", "a+b", "a/b", "QQ.", "Q Q"])
    func base64URLHasOneSpelling(_ text: String) {
        #expect(Base64URL.decode(text) == nil, "\(text) is accepted")
    }

    @Test func emptyInputIsEmpty() {
        #expect(Base64.decode("") == [])
        #expect(Base64URL.decode("") == [])
        #expect(Base64.encode([]) == "")
    }
}
