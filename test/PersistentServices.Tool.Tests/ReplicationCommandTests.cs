using System.Net;
using System.Net.Sockets;
using System.Text;
using PersistentServices.Calls;
using PersistentServices.Tool;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// <c>psctl replication</c> (docs/replication.md, "Failover"): usage and missing arguments exit 2 with what is missing; a
/// promotion without the peer key is not sent; a node out of reach exits 2; the promotion it sends is signed as the nodes
/// sign replication messages (the service verifies it with the same format, <see cref="PeerSignature"/>).
/// </summary>
public sealed class ReplicationCommandTests
{
    private static (int Exit, string Output) Run(Func<string, string?>? environment, params string[] args)
    {
        using var output = new StringWriter();
        var exit = Cli.Run(["replication", .. args], output, output, environment ?? (_ => null));
        return (exit, output.ToString());
    }

    [Fact]
    public void Help_ShowsBothCommands_AndExits0()
    {
        var (exit, output) = Run(null, "--help");
        Assert.Equal(Cli.Clean, exit);
        Assert.Contains("psctl replication promote <node-url> --service <ServiceName> --term <T>", output, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(new[] { "status", "http://127.0.0.1:1" }, "give --service <ServiceName> and the service's peer key")]
    [InlineData(new[] { "status" }, "node's base address")]
    [InlineData(new[] { "status", "not a url" }, "node's base address")]
    [InlineData(new[] { "promote", "http://127.0.0.1:1", "--term", "2" }, "give --service")]
    [InlineData(new[] { "promote", "http://127.0.0.1:1", "--service", "orders", "--term", "0" }, "unknown or incomplete option '--term'")]
    [InlineData(new[] { "promote", "http://127.0.0.1:1", "--service", "orders", "--term", "2" }, "peer key is needed")]
    [InlineData(new[] { "restart", "http://127.0.0.1:1" }, "unknown command 'restart'")]
    public void BadArguments_Exit2_SayingWhat(string[] args, string expected)
    {
        var (exit, output) = Run(null, args);
        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains(expected, output, StringComparison.Ordinal);
    }

    [Fact]
    public void ANodeOutOfReach_Exits2()
    {
        using var closed = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        closed.Bind(new IPEndPoint(IPAddress.Loopback, 0)); // bound, never listening: refused
        var (exit, output) = Run(_ => "a-peer-key-long-enough-0123456789", "promote", $"http://127.0.0.1:{((IPEndPoint)closed.LocalEndPoint!).Port}",
            "--service", "orders", "--term", "2");
        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains("could not be asked", output, StringComparison.Ordinal);
    }

    [Fact]
    public void ThePromotion_IsSignedForTheServiceWithTheTermAndTheNodeInTheSignedHeader()
    {
        const string key = "a-peer-key-long-enough-0123456789";
        using var request = ReplicationCommand.Promotion(new Uri("http://orders-1:8080"), "orders", 7, key);

        Assert.Equal("term=7;node=http://orders-1:8080/", request.Headers.GetValues("PS-Replication").Single());
        Assert.Equal("/ps/replication/promote", request.RequestUri!.AbsolutePath);
        var signature = PeerSignature.Parse(request.Headers.GetValues("PS-Signature").Single(), out var error);
        Assert.True(signature is not null, error);
        var message = new PeerMessage("POST", "/ps/replication/promote", "orders", "orders", "", "", "replication", "term=7;node=http://orders-1:8080/", "application/octet-stream");
        Assert.True(PeerSignature.Matches(Encoding.UTF8.GetBytes(key), signature.Value.UnixMs, signature.Value.Version, message,
            System.Security.Cryptography.SHA256.HashData(ReadOnlySpan<byte>.Empty), signature.Value.Mac));
        var other = message with { Dv = "term=7;node=http://orders-2:8080/" };
        Assert.False(PeerSignature.Matches(Encoding.UTF8.GetBytes(key), signature.Value.UnixMs, signature.Value.Version, other,
            System.Security.Cryptography.SHA256.HashData(ReadOnlySpan<byte>.Empty), signature.Value.Mac));
    }

    [Fact]
    public void TheSwitchover_NamesThePrimaryAndItsTerm_AndTheStatusRequestIsSignedToo()
    {
        const string key = "a-peer-key-long-enough-0123456789";
        using var switchover = ReplicationCommand.Switchover(new Uri("http://orders-0:8080"), "orders", 4, new Uri("http://orders-1:8080"), key);
        Assert.Equal("term=4;node=http://orders-0:8080/;to=http://orders-1:8080/", switchover.Headers.GetValues("PS-Replication").Single());

        using var status = ReplicationCommand.Status(new Uri("http://orders-0:8080"), "orders", key);
        Assert.Equal(HttpMethod.Get, status.Method);
        Assert.Equal("status", status.Headers.GetValues("PS-Replication").Single());
        var signature = PeerSignature.Parse(status.Headers.GetValues("PS-Signature").Single(), out var error);
        Assert.True(signature is not null, error);
        var message = new PeerMessage("GET", "/ps/replication/status", "orders", "orders", "", "", "replication", "status", "");
        Assert.True(PeerSignature.Matches(Encoding.UTF8.GetBytes(key), signature.Value.UnixMs, signature.Value.Version, message,
            System.Security.Cryptography.SHA256.HashData(ReadOnlySpan<byte>.Empty), signature.Value.Mac));
    }
}
