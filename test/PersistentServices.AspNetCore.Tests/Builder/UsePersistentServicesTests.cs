using System.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Options;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Builder;

/// <summary><c>AddPersistentServices()</c> from configuration, and <c>UsePersistentServices()</c>'s replay router.</summary>
public sealed class UsePersistentServicesTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public void AddPersistentServices_WithoutDelegate_BindsTheConfigurationSection()
    {
        var builder = WebApplication.CreateBuilder();
        builder.Configuration.AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["PersistentServices:LogDirectory"] = _dir.Path,
            ["PersistentServices:MaxSessions"] = "42",
            ["PersistentServices:ServiceName"] = "Orders",
            ["PersistentServices:Calls:PeerKey"] = new string('n', 32),
            ["PersistentServices:Calls:AcceptedPeerKeys:0"] = new string('o', 32),
            ["PersistentServices:Log:PageSizeBits"] = "23",
        });
        builder.Services.AddPersistentServices();
        using var app = builder.Build();

        var options = app.Services.GetRequiredService<IOptions<PersistentServicesOptions>>().Value;
        Assert.Equal(_dir.Path, options.LogDirectory);
        Assert.Equal(42, options.MaxSessions);
        Assert.Equal("Orders", options.ServiceName);
        Assert.Equal([new string('o', 32)], options.Calls.AcceptedPeerKeys);
        Assert.Equal(23, options.Log.PageSizeBits);
    }

    [Fact]
    public void AddPersistentServices_WithoutDelegate_BindsReplication_AsAKubernetesConfigMapWouldSetIt()
    {
        var builder = WebApplication.CreateBuilder();
        builder.Configuration.AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["PersistentServices:LogDirectory"] = _dir.Path,
            ["PersistentServices:Calls:PeerKey"] = new string('n', 32),
            ["PersistentServices:Replication:Role"] = "Replica",
            ["PersistentServices:Replication:Replicas:0"] = "http://orders-0.orders:8080",
            ["PersistentServices:Replication:Replicas:1"] = "http://orders-2.orders:8080",
            ["PersistentServices:Replication:RequiredReplicas"] = "2",
        });
        builder.Services.AddPersistentServices();
        using var app = builder.Build();

        var replication = app.Services.GetRequiredService<IOptions<PersistentServicesOptions>>().Value.Replication;
        Assert.Equal(ReplicationRole.Replica, replication.Role);
        Assert.Equal([new Uri("http://orders-0.orders:8080"), new Uri("http://orders-2.orders:8080")], replication.Replicas);
        Assert.Equal(2, replication.RequiredReplicas);
    }

    [Theory]
    [InlineData("Primary", null, null, "Replication.Replicas must name at least one replica")]
    [InlineData("Primary", "", null, "Replication.Replicas has an empty entry")]
    [InlineData("Primary", "ftp://x", null, "is not an absolute http or https address")]
    [InlineData("Replica", "http://a:1", "2", "RequiredReplicas must be between 0 and the number of Replicas (1;")]
    [InlineData("Replica", "http://a:1", null, "Calls.PeerKey is required with replication")]
    public void Replication_BadOptions_RefusedAtStartup_NamingTheOption(string role, string? replica, string? required, string expected)
    {
        var builder = WebApplication.CreateBuilder();
        var settings = new Dictionary<string, string?>
        {
            ["PersistentServices:LogDirectory"] = _dir.Path,
            ["PersistentServices:Replication:Role"] = role,
            ["PersistentServices:Replication:RequiredReplicas"] = required,
        };
        if (replica is not null)
        {
            settings["PersistentServices:Replication:Replicas:0"] = replica;
        }

        if (!expected.Contains("PeerKey", StringComparison.Ordinal))
        {
            settings["PersistentServices:Calls:PeerKey"] = new string('n', 32);
        }

        builder.Configuration.AddInMemoryCollection(settings);
        builder.Services.AddPersistentServices();
        using var app = builder.Build();

        var error = Assert.Throws<OptionsValidationException>(() => app.Services.GetRequiredService<IOptions<PersistentServicesOptions>>().Value);
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("Replica", "http://a:1,http://b:1", null, null, "Replication.Address (this node's own base address, as the other nodes reach it) is required with Failover = Raft")]
    [InlineData("Replica", "http://a:1", "http://me:1", null, "Raft needs at least three voters for a majority that survives one loss, and this group has 2")]
    [InlineData("Witness", "http://a:1", "http://me:1", null, "Replicas of a witness must name the group's log nodes (at least two)")]
    [InlineData("Primary", "http://a:1", "http://me:1", "ftp://w", "is not an absolute http or https address")]
    [InlineData("Primary", "http://a:1,http://b:1,http://c:1", "http://me:1", "http://w:1,http://v:1,http://u:1", "a promotion's majority need not include a node holding every acknowledged record")]
    public void Replication_BadFailoverOptions_RefusedAtStartup_NamingTheOption(string role, string replicas, string? address, string? witnesses, string expected)
    {
        var builder = WebApplication.CreateBuilder();
        var settings = new Dictionary<string, string?>
        {
            ["PersistentServices:LogDirectory"] = _dir.Path,
            ["PersistentServices:Calls:PeerKey"] = new string('n', 32),
            ["PersistentServices:Replication:Role"] = role,
            ["PersistentServices:Replication:Failover"] = "Raft",
            ["PersistentServices:Replication:Address"] = address,
        };
        foreach (var (replica, i) in replicas.Split(',').Select((r, i) => (r, i)))
        {
            settings[$"PersistentServices:Replication:Replicas:{i}"] = replica;
        }

        foreach (var (witness, i) in (witnesses ?? "").Split(',', StringSplitOptions.RemoveEmptyEntries).Select((w, i) => (w, i)))
        {
            settings[$"PersistentServices:Replication:Witnesses:{i}"] = witness;
        }

        builder.Configuration.AddInMemoryCollection(settings);
        builder.Services.AddPersistentServices();
        using var app = builder.Build();

        var error = Assert.Throws<OptionsValidationException>(() => app.Services.GetRequiredService<IOptions<PersistentServicesOptions>>().Value);
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Replication_OneListForEveryNode_ThisNodesOwnAddressIsSkipped_AndTheInitialPrimaryDecidesTheRole()
    {
        // A StatefulSet's pods share one configuration: every node's address in Replicas, each pod its own Address.
        Uri[] nodes = [new("http://orders-0.orders:8080"), new("http://orders-1.orders:8080"), new("http://orders-2.orders:8080")];
        foreach (var self in nodes)
        {
            var options = new ReplicationOptions { Failover = FailoverMode.Raft, Address = self, InitialPrimary = nodes[0] };
            foreach (var node in nodes)
            {
                options.Replicas.Add(node);
            }

            Assert.Equal(nodes.Where(n => n != self), options.Peers);
            Assert.Equal(self == nodes[0] ? ReplicationRole.Primary : ReplicationRole.Replica, options.ConfiguredRole);
            Assert.Equal(1, options.EffectiveRequiredReplicas);
            Assert.Empty(options.Validate(new PersistentServicesOptions { LogDirectory = _dir.Path, Calls = { PeerKey = new string('n', 32) } }));
        }
    }

    [Fact]
    public void AddPersistentServices_WithoutDelegate_DefaultsTheServiceNameToTheApplication()
    {
        var builder = WebApplication.CreateBuilder(new WebApplicationOptions { ApplicationName = "Shop" });
        builder.Configuration.AddInMemoryCollection(new Dictionary<string, string?> { ["PersistentServices:LogDirectory"] = _dir.Path });
        builder.Services.AddPersistentServices();
        using var app = builder.Build();

        Assert.Equal("Shop", app.Services.GetRequiredService<IOptions<PersistentServicesOptions>>().Value.ServiceName);
    }

    [Fact]
    public async Task AddPersistentServices_WithoutDelegate_NoLogDirectory_FailsAtStartup()
    {
        var builder = WebApplication.CreateBuilder();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Services.AddPersistentServices();
        await using var app = builder.Build();

        // UsePersistentServices() reads the options, so the validation fails there at the latest (ValidateOnStart otherwise).
        var error = await Assert.ThrowsAsync<OptionsValidationException>(() => app.StartAsync(TestContext.Current.CancellationToken));
        Assert.Contains("LogDirectory", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void AddPersistentServices_WithDelegate_DoesNotReadConfiguration()
    {
        var builder = WebApplication.CreateBuilder();
        builder.Configuration.AddInMemoryCollection(new Dictionary<string, string?> { ["PersistentServices:MaxSessions"] = "42" });
        builder.Services.AddPersistentServices(o => o.LogDirectory = _dir.Path);
        using var app = builder.Build();

        Assert.Equal(new PersistentServicesOptions().MaxSessions, app.Services.GetRequiredService<IOptions<PersistentServicesOptions>>().Value.MaxSessions);
    }

    [Fact]
    public void UsePersistentServices_OnABranchThatIsNoRouteBuilder_SaysWhatItNeeds()
    {
        var builder = WebApplication.CreateBuilder();
        builder.Services.AddPersistentServices(o => o.LogDirectory = _dir.Path);
        using var app = builder.Build();
        var branch = ((IApplicationBuilder)app).New();

        var error = Assert.Throws<InvalidOperationException>(() => branch.UsePersistentServices());
        Assert.Contains("WebApplication", error.Message, StringComparison.Ordinal);
    }

    /// <summary>
    /// Replay's router is a second routing middleware over the application's endpoint data sources (public routing API,
    /// no private WebApplication property): after a replay, the application's endpoints are still listed once each, for
    /// link generation and endpoint discovery.
    /// </summary>
    [Fact]
    public async Task ReplayRouter_AfterReplay_TheApplicationListsEachEndpointOnce()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a", amount = 5 });
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "x" });
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            var (cart, body) = await server.SendAsync(HttpMethod.Get, "/cart", session, null);
            Assert.Equal(HttpStatusCode.OK, cart.StatusCode);
            Assert.Equal("x", body.GetProperty("items")[0].GetString());

            var endpoints = server.App.Services.GetRequiredService<EndpointDataSource>().Endpoints;
            Assert.Equal(endpoints.Count, endpoints.Distinct().Count());
            Assert.Single(endpoints, e => e is RouteEndpoint { RoutePattern.RawText: "/counter/add" });
        }
    }
}
