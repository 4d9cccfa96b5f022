using System.Net;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Calls;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// The replication endpoints accept only this service's own nodes (docs/replication.md, "The protocol"): an unsigned or
/// wrongly signed shipment or promotion is 401, checked before the body is read; a body that is not the one its signed
/// header names, a malformed header, a body above the limit: 400/413 problem details; nothing reaches the replica's log.
/// A replica answers the service's requests 503 replica.
/// </summary>
public sealed class ReplicationEndpointsTests : IDisposable
{
    private const string PeerKey = "replication-endpoints-test-key-0123456789";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private Task<TestServer> StartReplicaAsync()
        => TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = PeerKey;
            o.Replication.Role = ReplicationRole.Replica;
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:1/"));
        });

    internal static HttpRequestMessage Shipment(string header, byte[] body, string caller = "orders", string key = PeerKey, byte[]? signedBody = null, string? path = null)
    {
        path ??= ReplicationEndpoints.AppendPath;
        var request = new HttpRequestMessage(HttpMethod.Post, path) { Content = new ByteArrayContent(body) };
        request.Content.Headers.ContentType = new System.Net.Http.Headers.MediaTypeHeaderValue("application/octet-stream");
        request.Headers.Add("PS-Replication", header);
        request.Headers.Add("PS-Caller", caller);
        request.Headers.Add("PS-Callee", "orders");
        var message = new PeerMessage("POST", path, caller, "orders", "", "", "replication", header, "application/octet-stream");
        request.Headers.Add("PS-Signature", PeerSignature.Sign(Encoding.UTF8.GetBytes(key), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(), PeerSignature.V2, message, signedBody ?? []));
        return request;
    }

    /// <summary>A status request signed with <paramref name="key"/> by and for "orders" (as psctl and the nodes sign it).</summary>
    internal static HttpRequestMessage StatusRequest(string key = PeerKey, string caller = "orders")
    {
        var request = new HttpRequestMessage(HttpMethod.Get, ReplicationEndpoints.StatusPath);
        request.Headers.Add("PS-Replication", "status");
        request.Headers.Add("PS-Caller", caller);
        request.Headers.Add("PS-Callee", "orders");
        var message = new PeerMessage("GET", ReplicationEndpoints.StatusPath, caller, "orders", "", "", "replication", "status", "");
        request.Headers.Add("PS-Signature", PeerSignature.Sign(Encoding.UTF8.GetBytes(key), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(), PeerSignature.V2, message, []));
        return request;
    }

    [Fact]
    public async Task TheStatus_SignedByThisService_IsShown_UnsignedOrWronglySigned_Is401()
    {
        await using var server = await StartReplicaAsync();

        using (var signed = await server.Client.SendAsync(StatusRequest(), Ct))
        {
            Assert.Equal(HttpStatusCode.OK, signed.StatusCode);
            Assert.Equal("Replica", JsonDocument.Parse(await signed.Content.ReadAsStringAsync(Ct)).RootElement.GetProperty("role").GetString());
        }

        using (var anonymous = await server.Client.GetAsync(ReplicationEndpoints.StatusPath, Ct))
        {
            await ProblemAsync(anonymous, HttpStatusCode.Unauthorized, "replication-peer");
        }

        using (var otherKey = await server.Client.SendAsync(StatusRequest("another-key-that-is-long-enough-000000"), Ct))
        {
            await ProblemAsync(otherKey, HttpStatusCode.Unauthorized, "replication-peer");
        }

        using (var otherService = await server.Client.SendAsync(StatusRequest(caller: "payments"), Ct))
        {
            await ProblemAsync(otherService, HttpStatusCode.Unauthorized, "replication-peer");
        }
    }

    [Fact]
    public async Task TheStatus_WithAnonymousStatus_IsShownUnsigned()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = PeerKey;
            o.Replication.Role = ReplicationRole.Replica;
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:1/"));
            o.Replication.AnonymousStatus = true;
        });

        using var anonymous = await server.Client.GetAsync(ReplicationEndpoints.StatusPath, Ct);

        Assert.Equal(HttpStatusCode.OK, anonymous.StatusCode);
    }

    /// <summary>The address a control message names in these tests: none of the test nodes' peers, and no Address is set, so it is "this node".</summary>
    internal const string ThisNode = "http://node.test/";

    private static string Header(long from, byte[] body, long term = 1, int reset = 0, long begin = 64)
        => $"term={term};from={from};begin={begin};anchor=0;reset={reset};sha256={Convert.ToHexStringLower(SHA256.HashData(body))}";

    private static async Task<JsonElement> ProblemAsync(HttpResponseMessage response, HttpStatusCode status, string type)
    {
        var text = await response.Content.ReadAsStringAsync(Ct);
        Assert.True(response.StatusCode == status, $"expected {(int)status}, got {(int)response.StatusCode}: {text}");
        var problem = JsonDocument.Parse(text).RootElement.Clone();
        Assert.Equal("urn:persistentservices:problem:" + type, problem.GetProperty("type").GetString());
        return problem;
    }

    [Fact]
    public async Task AProbe_SignedByThisServicesNode_GetsWhereTheReplicaStands()
    {
        await using var server = await StartReplicaAsync();

        using var response = await server.Client.SendAsync(Shipment(Header(-1, []), []), Ct);

        Assert.Equal(HttpStatusCode.Conflict, response.StatusCode);
        var answer = JsonDocument.Parse(await response.Content.ReadAsStringAsync(Ct)).RootElement;
        Assert.Equal("empty", answer.GetProperty("outcome").GetString());
        Assert.Equal(1, answer.GetProperty("term").GetInt64()); // the probe's term is taken (a newer primary fences older ones)
    }

    [Theory]
    [InlineData("another-key-that-is-long-enough-000000", "orders")]
    [InlineData(PeerKey, "payments")]
    public async Task AShipment_NotSignedByThisServicesNode_Is401_AndChangesNothing(string key, string caller)
    {
        await using var server = await StartReplicaAsync();
        var body = new byte[4096];

        using var response = await server.Client.SendAsync(Shipment(Header(64, body, reset: 1), body, caller, key), Ct);

        await ProblemAsync(response, HttpStatusCode.Unauthorized, "replication-peer");
        var replica = server.App.Services.GetRequiredService<ReplicationNode>().Replica!;
        Assert.True(replica.IsEmpty);
        Assert.Equal(0, replica.Term);
    }

    [Fact]
    public async Task AShipmentWhoseBytesAreNotTheSignedOnes_Is400_AndChangesNothing()
    {
        await using var server = await StartReplicaAsync();
        var signed = new byte[4096];
        var sent = new byte[4096];
        sent[100] = 1;

        using var response = await server.Client.SendAsync(Shipment(Header(64, signed, reset: 1), sent), Ct);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "replication-malformed");
        Assert.True(server.App.Services.GetRequiredService<ReplicationNode>().Replica!.IsEmpty);
    }

    [Theory]
    [InlineData("term=0;from=64;begin=64;anchor=0;reset=0;sha256=00")]
    [InlineData("term=1;from=64;begin=64;anchor=0;reset=0")]
    [InlineData("term=1;from=64;begin=128;anchor=0;reset=1;sha256=00")]
    [InlineData("term=1;from=x;begin=64;anchor=0;reset=0;sha256=00")]
    [InlineData("term=1;from=64;begin=64;anchor=0;reset=0;extra=1;sha256=00")]
    [InlineData("term=1;from=-1;begin=0;anchor=0;reset=0;candidate=0123456789abcdef;sha256=00")] // a candidate is 32 hex digits
    [InlineData("term=1;from=-1;begin=0;anchor=0;reset=0;candidate=0123456789ABCDEF0123456789ABCDEF;sha256=00")]
    [InlineData("term=1;from=-1;begin=0;anchor=0;reset=0;candidate=0123456789abcdef0123456789abcdeg;sha256=00")]
    [InlineData("term=1;from=-1;begin=0;anchor=0;reset=0;candidate=00000000000000000000000000000000;sha256=00")]
    [InlineData("term=1;from=-1;begin=0;anchor=0;reset=0;candidate=0123456789abcdef0123456789abcdef;candidate=0123456789abcdef0123456789abcdee;sha256=00")]
    [InlineData("term=1;from=64;begin=64;anchor=0;reset=0;candidate=0123456789abcdef0123456789abcdef;sha256=00")] // only a probe is a claim
    [InlineData("term=2;from=4096;begin=64;anchor=0;reset=0;cut=4096;sha256=00")] // a cut comes with its checksum
    [InlineData("term=2;from=4096;begin=64;anchor=0;reset=0;cutsum=17;sha256=00")] // and a checksum with its cut
    [InlineData("term=2;from=64;begin=64;anchor=0;reset=0;cut=4096;cutsum=17;sha256=00")] // a cut starts at its own address
    [InlineData("term=2;from=64;begin=64;anchor=0;reset=1;cut=64;cutsum=17;sha256=00")] // a cut is no reset
    [InlineData("term=2;from=-1;begin=0;anchor=0;reset=0;candidate=0123456789abcdef0123456789abcdef;cut=-1;cutsum=0;sha256=00")]
    [InlineData("term=2;from=4096;begin=64;anchor=0;reset=0;cut=4096;cutsum=4294967296;sha256=00")] // a checksum is 32 bits
    [InlineData("term=2;from=4096;begin=64;anchor=0;reset=0;cut=4096;cutsum=-1;sha256=00")]
    [InlineData("term=2;from=4096;begin=64;anchor=0;reset=0;cut=4096;cutsum=1;cut=4096;cutsum=1;sha256=00")]
    public async Task AMalformedHeader_Is400(string header)
    {
        await using var server = await StartReplicaAsync();

        using var response = await server.Client.SendAsync(Shipment(header, []), Ct);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "replication-malformed");
    }

    [Fact]
    public async Task ACutWithABody_Is400_AndChangesNothing()
    {
        await using var server = await StartReplicaAsync();
        byte[] body = [1];

        using var response = await server.Client.SendAsync(
            Shipment($"term=3;from=4096;begin=64;anchor=0;reset=0;cut=4096;cutsum=17;sha256={Convert.ToHexStringLower(SHA256.HashData(body))}", body), Ct);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "replication-malformed");
        Assert.Equal(0, server.App.Services.GetRequiredService<ReplicationNode>().Replica!.Term);
    }

    [Theory]
    [InlineData("another-key-that-is-long-enough-000000", "orders")]
    [InlineData(PeerKey, "payments")]
    public async Task ACut_NotSignedByThisServicesNode_Is401_AndChangesNothing(string key, string caller)
    {
        await using var server = await StartReplicaAsync();

        using var response = await server.Client.SendAsync(Shipment("term=3;from=4096;begin=64;anchor=0;reset=0;cut=4096;cutsum=17;sha256=" +
            Convert.ToHexStringLower(SHA256.HashData([])), [], caller, key), Ct);

        await ProblemAsync(response, HttpStatusCode.Unauthorized, "replication-peer");
        Assert.Equal(0, server.App.Services.GetRequiredService<ReplicationNode>().Replica!.Term);
    }

    [Fact]
    public async Task ACut_Unsigned_Is401()
    {
        await using var server = await StartReplicaAsync();
        using var request = new HttpRequestMessage(HttpMethod.Post, ReplicationEndpoints.AppendPath) { Content = new ByteArrayContent([]) };
        request.Content.Headers.ContentType = new System.Net.Http.Headers.MediaTypeHeaderValue("application/octet-stream");
        request.Headers.Add("PS-Replication", "term=3;from=4096;begin=64;anchor=0;reset=0;cut=4096;cutsum=17;sha256=" + Convert.ToHexStringLower(SHA256.HashData([])));
        request.Headers.Add("PS-Caller", "orders");
        request.Headers.Add("PS-Callee", "orders");

        using var response = await server.Client.SendAsync(request, Ct);

        await ProblemAsync(response, HttpStatusCode.Unauthorized, "replication-peer");
        Assert.Equal(0, server.App.Services.GetRequiredService<ReplicationNode>().Replica!.Term);
    }

    [Fact]
    public async Task ACut_OfAnEmptyReplica_IsAnsweredEmpty_AndARoundTripOfItsHeaderParses()
    {
        await using var server = await StartReplicaAsync();
        var cut = new Shipment(3, 4096, 64, 0, false, ReadOnlyMemory<byte>.Empty, Cut: 4096, CutSum: 4_000_000_000);
        Assert.True(ReplicationMessages.TryParse(ReplicationMessages.Describe(cut), out var parsed));
        Assert.Equal(cut, parsed);

        using var response = await server.Client.SendAsync(Shipment(ReplicationMessages.Describe(cut), []), Ct);

        Assert.Equal(HttpStatusCode.Conflict, response.StatusCode);
        Assert.Equal("empty", JsonDocument.Parse(await response.Content.ReadAsStringAsync(Ct)).RootElement.GetProperty("outcome").GetString());
    }

    [Fact]
    public async Task AClaimWithABody_Is400_AndChangesNothing()
    {
        await using var server = await StartReplicaAsync();
        byte[] body = [1];

        using var response = await server.Client.SendAsync(
            Shipment($"term=3;from=-1;begin=0;anchor=0;reset=0;candidate={Guid.NewGuid():N};sha256={Convert.ToHexStringLower(SHA256.HashData(body))}", body), Ct);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "replication-malformed");
        Assert.Equal(0, server.App.Services.GetRequiredService<ReplicationNode>().Replica!.Term);
    }

    [Fact]
    public async Task APromotion_Unsigned_Is401_AndTheReplicaStaysOne()
    {
        await using var server = await StartReplicaAsync();
        using var request = new HttpRequestMessage(HttpMethod.Post, ReplicationEndpoints.PromotePath) { Content = new ByteArrayContent([]) };
        request.Headers.Add("PS-Replication", $"term=5;node={ThisNode}");

        using var response = await server.Client.SendAsync(request, Ct);

        await ProblemAsync(response, HttpStatusCode.Unauthorized, "replication-peer");
        Assert.Equal(ReplicationRole.Replica, server.App.Services.GetRequiredService<ReplicationNode>().Role);
    }

    [Fact]
    public async Task APromotion_OfAReplicaThatHoldsNothing_Is409()
    {
        await using var server = await StartReplicaAsync();

        using var response = await server.Client.SendAsync(Shipment($"term=5;node={ThisNode}", [], path: ReplicationEndpoints.PromotePath), Ct);

        var problem = await ProblemAsync(response, HttpStatusCode.Conflict, "replication-not-promoted");
        Assert.Contains("holds no log yet", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
    }

    private Task<TestServer> StartPrimaryAsync()
        => TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = PeerKey;
            o.Replication.Role = ReplicationRole.Primary;
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:1/")); // nobody there: the replicas do not answer
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:2/"));
        });

    [Theory]
    [InlineData(null, "orders")]
    [InlineData("another-key-that-is-long-enough-000000", "orders")]
    [InlineData(PeerKey, "payments")]
    public async Task ASwitchover_NotSignedByThisServicesNode_Is401_AndThePrimaryStaysOne(string? key, string caller)
    {
        await using var server = await StartPrimaryAsync();
        using var request = key is null
            ? new HttpRequestMessage(HttpMethod.Post, ReplicationEndpoints.SwitchoverPath) { Content = new ByteArrayContent([]), Headers = { { "PS-Replication", $"term=1;node={ThisNode};to=" } } }
            : Shipment($"term=1;node={ThisNode};to=", [], caller, key, path: ReplicationEndpoints.SwitchoverPath);

        using var response = await server.Client.SendAsync(request, Ct);

        await ProblemAsync(response, HttpStatusCode.Unauthorized, "replication-peer");
        var node = server.App.Services.GetRequiredService<ReplicationNode>();
        Assert.Equal(ReplicationRole.Primary, node.Role);
        Assert.Equal(1, node.Term);
    }

    [Theory]
    [InlineData("term=2")]
    [InlineData("to=")] // names no node and no term (the format before issue 51)
    [InlineData("term=1;to=")]
    [InlineData("node=http://node.test/;to=")]
    [InlineData("term=1;node=http://node.test/")] // no to=
    [InlineData("term=1;node=http://node.test/;to=orders-1:8080")]
    [InlineData("term=1;node=http://node.test/;to=ftp://127.0.0.1:1/")]
    [InlineData("term=1;node=orders-0;to=")]
    [InlineData("term=1;node=http://node.test/;to=;term=1")] // nothing after to=
    [InlineData("term=1;term=1;node=http://node.test/;to=")]
    [InlineData("term=1;node=http://node.test/;candidate=0123456789abcdef0123456789abcdef;to=")] // a candidate is a promotion's
    public async Task ASwitchover_WithAMalformedHeader_Is400(string header)
    {
        await using var server = await StartPrimaryAsync();

        using var response = await server.Client.SendAsync(Shipment(header, [], path: ReplicationEndpoints.SwitchoverPath), Ct);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "replication-malformed");
    }

    [Theory]
    [InlineData("term=1;node=http://node.test/;to=", "none of its replicas answers now")]
    [InlineData("term=1;node=http://node.test/;to=http://127.0.0.1:9/", "is not one of its replicas")]
    public async Task ASwitchover_WithNoReplicaToHandOverTo_Is409_AndThePrimaryServesOn(string header, string why)
    {
        await using var server = await StartPrimaryAsync();

        using var response = await server.Client.SendAsync(Shipment(header, [], path: ReplicationEndpoints.SwitchoverPath), Ct);

        var problem = await ProblemAsync(response, HttpStatusCode.Conflict, "replication-not-switched");
        Assert.Contains(why, problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        var node = server.App.Services.GetRequiredService<ReplicationNode>();
        Assert.Equal(ReplicationRole.Primary, node.Role);
        Assert.False(server.App.Services.GetRequiredService<PersistentServices.Hosting.ServiceAvailability>().IsHandingOver);
    }

    [Fact]
    public async Task ASwitchover_OfAReplica_Is409()
    {
        await using var server = await StartReplicaAsync();

        using var response = await server.Client.SendAsync(Shipment($"term=1;node={ThisNode};to=", [], path: ReplicationEndpoints.SwitchoverPath), Ct);

        var problem = await ProblemAsync(response, HttpStatusCode.Conflict, "replication-stale-term");
        Assert.Contains("the Replica of term 0", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
    }

    [Fact]
    public async Task ASwitchover_ForAnotherTermThanThePrimarys_Is409StaleTerm_AndThePrimaryServesOn()
    {
        // A switchover captured in an earlier term (made for the primary before a failover) does nothing to this term's primary.
        await using var server = await StartPrimaryAsync();

        using var response = await server.Client.SendAsync(Shipment($"term=2;node={ThisNode};to=", [], path: ReplicationEndpoints.SwitchoverPath), Ct);

        await ProblemAsync(response, HttpStatusCode.Conflict, "replication-stale-term");
        var node = server.App.Services.GetRequiredService<ReplicationNode>();
        Assert.Equal(ReplicationRole.Primary, node.Role);
        Assert.False(server.App.Services.GetRequiredService<PersistentServices.Hosting.ServiceAvailability>().IsHandingOver);
    }

    [Fact]
    public async Task ASwitchover_MadeForAnotherNodeOfTheGroup_Is409Misdirected_AndThePrimaryServesOn()
    {
        // The primary's Replicas are http://127.0.0.1:1/ and :2/: a switchover signed for one of them (the primary there, say,
        // captured, in the same term) is refused here.
        await using var server = await StartPrimaryAsync();

        using var response = await server.Client.SendAsync(Shipment("term=1;node=http://127.0.0.1:1/;to=", [], path: ReplicationEndpoints.SwitchoverPath), Ct);

        await ProblemAsync(response, HttpStatusCode.Conflict, "replication-misdirected");
        Assert.Equal(ReplicationRole.Primary, server.App.Services.GetRequiredService<ReplicationNode>().Role);
        Assert.False(server.App.Services.GetRequiredService<PersistentServices.Hosting.ServiceAvailability>().IsHandingOver);
    }

    [Theory]
    [InlineData("switchover")]
    [InlineData("promote")]
    public async Task AControlMessage_SentTwice_IsTakenOnce_TheSecondIs409Replayed(string kind)
    {
        // The first is taken (and refused for its own reason: no such replica, nothing to promote); the very same signed
        // message again is refused before it does anything.
        await using var server = kind == "switchover" ? await StartPrimaryAsync() : await StartReplicaAsync();
        var (path, header) = kind == "switchover"
            ? (ReplicationEndpoints.SwitchoverPath, $"term=1;node={ThisNode};to=http://127.0.0.1:9/")
            : (ReplicationEndpoints.PromotePath, $"term=5;node={ThisNode}");
        using var first = Shipment(header, [], path: path);
        using var again = new HttpRequestMessage(HttpMethod.Post, path) { Content = new ByteArrayContent([]) };
        again.Content.Headers.ContentType = first.Content!.Headers.ContentType;
        foreach (var h in first.Headers)
        {
            again.Headers.TryAddWithoutValidation(h.Key, h.Value);
        }

        using var taken = await server.Client.SendAsync(first, Ct);
        await ProblemAsync(taken, HttpStatusCode.Conflict, kind == "switchover" ? "replication-not-switched" : "replication-not-promoted");
        using var replayed = await server.Client.SendAsync(again, Ct);
        await ProblemAsync(replayed, HttpStatusCode.Conflict, "replication-replayed");
    }

    [Theory]
    [InlineData("term=5")] // names no node (the format before issue 51)
    [InlineData("term=5;node=http://node.test/;to=")]
    [InlineData("term=5;node=http://node.test/;candidate=0123456789ABCDEF0123456789ABCDEF")]
    [InlineData("node=http://node.test/")]
    public async Task APromotion_WithAMalformedHeader_Is400(string header)
    {
        await using var server = await StartReplicaAsync();

        using var response = await server.Client.SendAsync(Shipment(header, [], path: ReplicationEndpoints.PromotePath), Ct);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "replication-malformed");
    }

    [Fact]
    public async Task APromotion_MadeForAnotherNodeOfTheGroup_Is409Misdirected_AndTheReplicaStaysOne()
    {
        await using var server = await StartReplicaAsync(); // its Replicas: http://127.0.0.1:1/

        using var response = await server.Client.SendAsync(Shipment("term=5;node=http://127.0.0.1:1/", [], path: ReplicationEndpoints.PromotePath), Ct);

        await ProblemAsync(response, HttpStatusCode.Conflict, "replication-misdirected");
        var node = server.App.Services.GetRequiredService<ReplicationNode>();
        Assert.Equal(ReplicationRole.Replica, node.Role);
        Assert.Equal(0, node.Term);
    }

    [Fact]
    public async Task TheServicesRequests_OnAReplica_Are503Replica_WithRetryAfter()
    {
        await using var server = await StartReplicaAsync();

        using var start = await server.Client.PostAsync("/ps/sessions", null, Ct);

        await ProblemAsync(start, HttpStatusCode.ServiceUnavailable, "replica");
        Assert.Equal("1", start.Headers.RetryAfter?.ToString());
    }
}

/// <summary>
/// Automatic failover's messages (docs/replication.md, "Failover"): Raft's (DotNext's) arrive at <c>/ps/consensus</c> on
/// the service's port and are accepted only signed by this service's own nodes; a witness takes a promotion's term and
/// refuses any log.
/// </summary>
public sealed class RaftFailoverEndpointsTests : IDisposable
{
    private const string PeerKey = "raft-failover-endpoints-test-key-0123456789";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private Task<TestServer> StartAsync(ReplicationRole role)
        => TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = PeerKey;
            o.Replication.Role = role;
            o.Replication.Failover = FailoverMode.Raft;
            o.Replication.Address = new Uri("http://127.0.0.1:1/");
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:2/"));
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:3/"));
        });

    private static HttpRequestMessage RaftMessage(string key, string caller, byte[] body)
    {
        var request = new HttpRequestMessage(HttpMethod.Post, RaftFailover.ProtocolPath) { Content = new ByteArrayContent(body) };
        request.Content.Headers.ContentType = new System.Net.Http.Headers.MediaTypeHeaderValue("application/octet-stream");
        request.Headers.Add("PS-Caller", caller);
        request.Headers.Add("PS-Callee", "orders");
        var message = new PeerMessage("POST", RaftFailover.ProtocolPath, caller, "orders", "", "", "consensus", "", "application/octet-stream");
        request.Headers.Add("PS-Signature", PeerSignature.Sign(Encoding.UTF8.GetBytes(key), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(), PeerSignature.V2, message, body));
        return request;
    }

    [Theory]
    [InlineData("another-key-that-is-long-enough-000000", "orders")]
    [InlineData(PeerKey, "payments")]
    public async Task ARaftMessage_NotSignedByThisServicesNode_Is401_BeforeRaftSeesIt(string key, string caller)
    {
        await using var server = await StartAsync(ReplicationRole.Replica);

        using var response = await server.Client.SendAsync(RaftMessage(key, caller, "vote for me"u8.ToArray()), Ct);

        Assert.Equal(HttpStatusCode.Unauthorized, response.StatusCode);
        Assert.Contains("replication-peer", await response.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
    }

    [Fact]
    public async Task ARaftMessage_Unsigned_Is401_AndASignedOne_ReachesRaft()
    {
        await using var server = await StartAsync(ReplicationRole.Replica);
        using var unsigned = new HttpRequestMessage(HttpMethod.Post, RaftFailover.ProtocolPath) { Content = new ByteArrayContent([1, 2, 3]) };

        using var refused = await server.Client.SendAsync(unsigned, Ct);
        using var passed = await server.Client.SendAsync(RaftMessage(PeerKey, "orders", [1, 2, 3]), Ct);

        Assert.Equal(HttpStatusCode.Unauthorized, refused.StatusCode);
        Assert.NotEqual(HttpStatusCode.Unauthorized, passed.StatusCode); // DotNext's answer to a message it cannot parse
    }

    [Fact]
    public async Task AWitness_TakesAPromotionsTerm_RefusesAnyLog_AndServesNothing()
    {
        await using var server = await StartAsync(ReplicationRole.Witness);
        var node = server.App.Services.GetRequiredService<ReplicationNode>();
        Assert.Equal(ReplicationRole.Witness, node.Role);

        // A promotion's claim (a probe of a newer term that names its candidate) is taken durably, with the vote.
        var candidate = Guid.NewGuid();
        using var claim = await server.Client.SendAsync(ReplicationEndpointsTestsAccess.Shipment(
            $"term=4;from=-1;begin=0;anchor=0;reset=0;candidate={candidate:N};sha256={Convert.ToHexStringLower(SHA256.HashData([]))}", [], PeerKey), Ct);
        Assert.Equal(HttpStatusCode.Conflict, claim.StatusCode);
        Assert.Contains("\"empty\"", await claim.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        Assert.Equal(4, node.Term);
        Assert.Equal((4L, candidate), (TermFile.Read(_dir.Path)!.Value.Term, TermFile.Read(_dir.Path)!.Value.VotedFor));

        // Another candidate's claim of the same term is denied: a witness votes once per term, as a replica does.
        using var other = await server.Client.SendAsync(ReplicationEndpointsTestsAccess.Shipment(
            $"term=4;from=-1;begin=0;anchor=0;reset=0;candidate={Guid.NewGuid():N};sha256={Convert.ToHexStringLower(SHA256.HashData([]))}", [], PeerKey), Ct);
        Assert.Equal(HttpStatusCode.Conflict, other.StatusCode);
        Assert.Contains("\"denied\"", await other.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);

        // A log is refused: a witness holds none.
        var body = new byte[4096];
        using var shipment = await server.Client.SendAsync(
            ReplicationEndpointsTestsAccess.Shipment($"term=4;from=64;begin=64;anchor=0;reset=1;sha256={Convert.ToHexStringLower(SHA256.HashData(body))}", body, PeerKey), Ct);
        Assert.Equal(HttpStatusCode.Conflict, shipment.StatusCode);
        Assert.Contains("replication-witness", await shipment.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        Assert.True(node.Replica!.IsEmpty);

        // Never promoted, and it serves nothing.
        var (promoted, why) = await node.PromoteAsync(5, Guid.Empty, Ct);
        Assert.False(promoted, why);
        using var start = await server.Client.PostAsync("/ps/sessions", null, Ct);
        Assert.Equal(HttpStatusCode.ServiceUnavailable, start.StatusCode);
    }
}

/// <summary>Builds signed replication messages for tests outside <see cref="ReplicationEndpointsTests"/>.</summary>
internal static class ReplicationEndpointsTestsAccess
{
    public static HttpRequestMessage Shipment(string header, byte[] body, string key)
    {
        var request = new HttpRequestMessage(HttpMethod.Post, ReplicationEndpoints.AppendPath) { Content = new ByteArrayContent(body) };
        request.Content.Headers.ContentType = new System.Net.Http.Headers.MediaTypeHeaderValue("application/octet-stream");
        request.Headers.Add("PS-Replication", header);
        request.Headers.Add("PS-Caller", "orders");
        request.Headers.Add("PS-Callee", "orders");
        var message = new PeerMessage("POST", ReplicationEndpoints.AppendPath, "orders", "orders", "", "", "replication", header, "application/octet-stream");
        request.Headers.Add("PS-Signature", PeerSignature.Sign(Encoding.UTF8.GetBytes(key), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(), PeerSignature.V2, message, []));
        return request;
    }
}
