import Foundation
import Testing

@testable import LedgerCrypto

/// A compact JWS is split in place exactly as splitting its text on "." would split it.
@Suite struct CompactJWSTests {
    @Test(arguments: ["", ".", "..", "...", "a.b.c", "a..c", ".b.", "abc", "a.b", "a.b.c.d", "eyJ.eyJ.sig", "a.b.c.", ".a.b.c", "ü.ö.ä"])
    func splitsAsTextSplittingDoes(_ text: String) {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map { Array($0) }
        var copy = text
        copy.withUTF8 { bytes in
            #expect(CompactJWS.segmentCount(bytes) == parts.count)
            let jws = CompactJWS(bytes)
            #expect((jws != nil) == (parts.count == 3))
            if let jws {
                #expect(Array(bytes[jws.header]) == parts[0])
                #expect(Array(bytes[jws.payload]) == parts[1])
                #expect(Array(bytes[jws.signature]) == parts[2])
                #expect(Array(bytes[jws.signingInput]) == parts[0] + [UInt8(ascii: ".")] + parts[1])
            }
        }
    }
}
