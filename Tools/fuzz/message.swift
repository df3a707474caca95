// Wire messages of the sync protocol, as a peer or app sends them: each decodes or is refused as a protocol
// violation, never traps; what decodes re-encodes to bytes that decode to the same message.
import Foundation
import TributaryModel
import TributaryProtocol

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    let messages: [Message] = [.ping(nonce: 7), .pong(nonce: 1 << 40), .mark(request: 3), .markReply(request: 3)]
    // And one message of each kind byte, empty after it, for the fuzzer to fill.
    writeSeeds(messages.map(MessageCodec.encode) + (0..<12).map { [UInt8($0)] })
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    let message: Message
    do {
        message = try MessageCodec.decode(bytes)
    } catch {
        if error.message.isEmpty { wrong("a violation without a message") }
        return 0
    }
    let encoded = MessageCodec.encode(message)
    guard let again = try? MessageCodec.decode(encoded) else {
        wrong("\(message) re-encodes to bytes that do not decode")
    }
    guard again == message, MessageCodec.encode(again) == encoded else { wrong("\(message) reads back as \(again)") }
    return 0
}
