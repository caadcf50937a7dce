// libFuzzer harness for the App Store Connect key file (`ledger apple … --private-key FILE`) and ES256
// signature spellings: any bytes must parse or throw, never trap. A key that parses signs, and its public
// half verifies the signature; a DER signature that converts to R‖S converts back to the same R‖S.
import AppStoreServerAPI
import LedgerCrypto

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAppStoreKey(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    if let key = try? AppStoreConnectCredentials.privateKey(pem: bytes, source: "fuzz") {
        let message = Array("header.claims".utf8)
        let signature = try? key.sign(message)
        expect(signature.map { (try? key.publicKey.isValidSignature($0, for: message)) == true } == true, "a parsed key's signature does not verify")
        expect((try? ES256PublicKey(pem: key.publicKey.pem)) == key.publicKey, "the public key does not survive PEM")
    }
    _ = try? ES256PublicKey(pem: String(decoding: bytes, as: UTF8.self))
    if let raw = ES256Signature.raw(fromDER: bytes) {
        expect((try? ES256Signature.der(fromRaw: raw)).flatMap(ES256Signature.raw(fromDER:)) == raw, "R‖S does not round-trip through DER")
    }
    return 0
}
