import NIOCore
import NIOPosix
import Synchronization

/// A TCP forwarder on 127.0.0.1, as a virtual address or a load balancer in front of PostgreSQL would be: each
/// connection it accepts is joined to a new connection to the target port. ``retarget(to:)`` points new connections
/// elsewhere (a promoted standby) and closes the open ones.
final class LoopbackForwarder: Sendable {
    let port: Int
    private let server: any Channel
    private let connections: Connections

    /// Where new connections go, and the connections open.
    private final class Connections: Sendable {
        let state: Mutex<(target: Int, open: [any Channel])>
        init(target: Int) { state = Mutex((target, [])) }
    }

    private init(port: Int, server: any Channel, connections: Connections) {
        self.port = port
        self.server = server
        self.connections = connections
    }

    static func start(to target: Int) async throws -> LoopbackForwarder {
        let connections = Connections(target: target)
        let group = MultiThreadedEventLoopGroup.singleton
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                let target = connections.state.withLock { $0.target }
                return ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { outbound in
                        outbound.eventLoop.makeCompletedFuture {
                            try outbound.pipeline.syncOperations.addHandler(Forward(partner: inbound))
                        }
                    }
                    .connect(host: "127.0.0.1", port: target)
                    .flatMap { outbound in
                        connections.state.withLock { $0.open += [inbound, outbound] }
                        return inbound.eventLoop.makeCompletedFuture {
                            try inbound.pipeline.syncOperations.addHandler(Forward(partner: outbound))
                        }.flatMap { inbound.setOption(.autoRead, value: true) }
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = server.localAddress?.port else { throw ForwarderError() }
        return LoopbackForwarder(port: port, server: server, connections: connections)
    }

    /// Points new connections at `target`, and closes every connection open now.
    func retarget(to target: Int) {
        let open = connections.state.withLock { state in
            state.target = target
            defer { state.open = [] }
            return state.open
        }
        for channel in open { channel.close(promise: nil) }
    }

    func close() async {
        retarget(to: 0)
        try? await server.close().get()
    }

    struct ForwarderError: Error {}

    /// Writes what one side reads to the other, and closes the other when one closes.
    private final class Forward: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let partner: any Channel

        init(partner: any Channel) { self.partner = partner }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            partner.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            partner.close(promise: nil)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
