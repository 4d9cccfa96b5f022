using System.Buffers.Text;
using System.Globalization;
using System.Net.Sockets;
using Yarp.ReverseProxy.Forwarder;

namespace PersistentServices.Gateway.Tests;

/// <summary>Routing: the owner from the session id, keys by rendezvous hashing, session starts round-robin.</summary>
public sealed class GatewayServiceTests
{
    private static GatewayService Service(params int[] ordinals)
    {
        var options = new GatewayServiceOptions { Persistent = true };
        foreach (var ordinal in ordinals)
        {
            options.Instances[ordinal.ToString(CultureInfo.InvariantCulture)] = $"http://127.0.0.1:{5000 + ordinal}/";
        }

        options.PlainPaths.Add("/plain");
        return new GatewayService("store", options);
    }

    private static string SessionId(byte ordinal)
    {
        var bytes = new byte[16];
        Random.Shared.NextBytes(bytes);
        bytes[0] = ordinal;
        return Base64Url.EncodeToString(bytes);
    }

    [Theory]
    [InlineData(0)]
    [InlineData(2)]
    [InlineData(7)]
    public void Route_SessionHeader_GoesToTheOrdinalInTheIdsFirstByte(int ordinal)
    {
        var service = Service(0, 2, 7);

        var route = service.Route("POST", "/cart/items", SessionId((byte)ordinal), null);

        Assert.Equal(Placement.Session, route.Placement);
        Assert.Equal(ordinal, route.Instance!.Ordinal);
        Assert.Equal($"http://127.0.0.1:{5000 + ordinal}", route.Instance.Address);
    }

    [Fact]
    public void Route_DeleteSession_GoesToTheOwnerNamedInThePath()
    {
        var route = Service(0, 1, 2).Route("DELETE", "/ps/sessions/" + SessionId(1), null, null);

        Assert.Equal(Placement.Session, route.Placement);
        Assert.Equal(1, route.Instance!.Ordinal);
    }

    [Fact]
    public void Route_SessionOfAnUnknownInstance_IsUnknownOwner_ButOneInstanceOwnsEverySession()
    {
        Assert.Equal(Placement.UnknownOwner, Service(0, 1).Route("POST", "/x", SessionId(9), null).Placement);
        var single = Service(0).Route("POST", "/x", SessionId(9), null);
        Assert.Equal(Placement.Session, single.Placement);
        Assert.Equal(0, single.Instance!.Ordinal);
    }

    [Fact]
    public void Route_MalformedSession_GoesToOneInstance_TheSameEachTime()
    {
        var service = Service(0, 1, 2);
        var first = service.Route("POST", "/x", "not-a-session", null);

        Assert.Equal(Placement.Session, first.Placement);
        Assert.All(Enumerable.Range(0, 10), _ => Assert.Equal(first.Instance, service.Route("POST", "/x", "not-a-session", null).Instance));
    }

    [Fact]
    public void Route_SessionStart_IsRoundRobin()
    {
        var service = Service(0, 1, 2);

        var ordinals = Enumerable.Range(0, 6).Select(_ => service.Route("POST", "/ps/sessions", null, null)).ToList();

        Assert.All(ordinals, r => Assert.Equal(Placement.SessionStart, r.Placement));
        Assert.Equal([0, 1, 2, 0, 1, 2], ordinals.Select(r => (int)r.Instance!.Ordinal));
    }

    [Fact]
    public void DrainingInstance_GetsNoNewSessionsOrGeneratedKeys_ButKeepsItsSessionsAndKeys()
    {
        var options = new GatewayServiceOptions { Persistent = true };
        options.Instances["0"] = "http://127.0.0.1:5000";
        options.Instances["1"] = "http://127.0.0.1:5001";
        options.DrainingInstances.Add("1");
        var service = new GatewayService("store", options);
        var keys = Enumerable.Range(0, 200).Select(i => "k" + i.ToString(CultureInfo.InvariantCulture)).ToList();

        Assert.All(Enumerable.Range(0, 6), _ => Assert.Equal(0, service.Route("POST", "/ps/sessions", null, null).Instance!.Ordinal));
        Assert.All(keys, k => Assert.Equal(0, service.ForNewKey(k).Ordinal));
        Assert.Equal(1, service.Route("POST", "/x", SessionId(1), null).Instance!.Ordinal);
        Assert.Contains(keys, k => service.Route("POST", "/x", null, k).Instance!.Ordinal == 1); // client keys keep their owner
    }

    [Fact]
    public void ForKey_IsStable_AndSpreadsKeys()
    {
        var service = Service(0, 1, 2, 3);
        var keys = Enumerable.Range(0, 4000).Select(i => "key-" + i.ToString(CultureInfo.InvariantCulture)).ToList();

        var owners = keys.Select(k => service.ForKey(k).Ordinal).ToList();

        Assert.Equal(owners, keys.Select(k => Service(3, 2, 1, 0).ForKey(k).Ordinal)); // the same in another gateway copy, whatever the order
        Assert.All(owners.GroupBy(o => o), g => Assert.InRange(g.Count(), 800, 1200)); // about a quarter each
    }

    [Fact]
    public void ForKey_AddingAnInstance_MovesOnlyTheKeysItWins_RemovingOne_OnlyItsOwn()
    {
        var keys = Enumerable.Range(0, 4000).Select(i => "key-" + i.ToString(CultureInfo.InvariantCulture)).ToList();
        var three = Service(0, 1, 2);
        var four = Service(0, 1, 2, 3);
        var two = Service(0, 2);

        foreach (var key in keys)
        {
            var before = three.ForKey(key).Ordinal;
            var added = four.ForKey(key).Ordinal;
            Assert.True(added == before || added == 3, $"{key} moved from {before} to {added}");
            var removed = two.ForKey(key).Ordinal;
            Assert.True(before == 1 || removed == before, $"{key} moved from {before} to {removed}");
        }

        var moved = keys.Count(k => four.ForKey(k).Ordinal == 3);
        Assert.InRange(moved, 800, 1200); // about a quarter move to the new instance
    }

    [Fact]
    public void Route_KeyRequest_GoesToTheKeysInstance()
    {
        var service = Service(0, 1, 2);

        var route = service.Route("POST", "/deposit", null, "op-42");

        Assert.Equal(Placement.Key, route.Placement);
        Assert.Equal(service.ForKey("op-42"), route.Instance);
    }

    [Theory]
    [InlineData("/deposit", true)]
    [InlineData("/plain", false)]
    [InlineData("/plain/x", false)]
    [InlineData("/plainer", true)]
    public void HonoursIdentity_PersistentExceptPlainPaths(string path, bool honours)
        => Assert.Equal(honours, Service(0).HonoursIdentity(path));

    [Fact]
    public void HonoursIdentity_NotPersistent_Never()
    {
        var options = new GatewayServiceOptions();
        options.Instances["0"] = "http://127.0.0.1:5000";

        Assert.False(new GatewayService("s", options).HonoursIdentity("/deposit"));
    }

    [Fact]
    public void Match_LongestPrefixWins_AndIsRemoved()
    {
        var options = new PersistentGatewayOptions();
        options.Services["all"] = new GatewayServiceOptions();
        options.Services["store"] = new GatewayServiceOptions { PathPrefix = "/store" };
        options.Services["all"].Instances["0"] = "http://127.0.0.1:1";
        options.Services["store"].Instances["0"] = "http://127.0.0.1:2";
        var topology = new GatewayTopology(options);

        Assert.Equal(("store", "/ps/sessions"), Name(topology.Match("/store/ps/sessions")));
        Assert.Equal(("store", "/"), Name(topology.Match("/store")));
        Assert.Equal(("all", "/storefront"), Name(topology.Match("/storefront")));

        static (string?, string) Name((GatewayService? Service, string Path) m) => (m.Service?.Name, m.Path);
    }

    [Fact]
    public void NeverReached_OnlyARefusedConnection()
    {
        var refused = new HttpRequestException(HttpRequestError.ConnectionError, "refused", new SocketException((int)SocketError.ConnectionRefused));
        var reset = new HttpRequestException(HttpRequestError.ResponseEnded, "ended", new IOException("reset"));
        var timedOut = new HttpRequestException(HttpRequestError.ConnectionError, "timeout", new TimeoutException());

        Assert.True(GatewayForwarder.NeverReached(ForwarderError.Request, refused));
        Assert.False(GatewayForwarder.NeverReached(ForwarderError.Request, reset));
        Assert.False(GatewayForwarder.NeverReached(ForwarderError.Request, timedOut));
        Assert.False(GatewayForwarder.NeverReached(ForwarderError.RequestTimedOut, refused));
        Assert.False(GatewayForwarder.NeverReached(ForwarderError.ResponseBodyDestination, refused));
    }
}
