using System.Collections.Concurrent;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;

namespace PersistentServices.Client.Tests;

/// <summary>
/// The client follows a replication group's primary (<see cref="PersistentClientOptions.ReplicationGroups"/>, docs/client.md
/// "Replication groups"): nodes that refuse the connection, do not answer, or answer <c>503 replica</c> are passed over for
/// the next node of the group, with the request's own session and number; nothing else is, and nothing leaves its group.
/// </summary>
public sealed class ReplicationGroupTests : IDisposable
{
    private const string A = "http://a.test";
    private const string B = "http://b.test";

    private readonly TempDirectory _dir = new();

    /// <summary>The replicated service's sessions, shared by its nodes (a promoted replica serves every session of the primary).</summary>
    private readonly FakeSessionServer _service = new();

    private readonly Nodes _nodes;

    public ReplicationGroupTests() => _nodes = new Nodes(_service);

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose()
    {
        _nodes.Dispose();
        _service.Dispose();
        _dir.Dispose();
    }

    private ClientHost Start(string baseAddress, IEnumerable<string[]> groups, Action<PersistentClientOptions>? configure = null, string name = "svc")
        => ClientHost.Start(_dir.Path, _nodes, new Uri(baseAddress), options =>
        {
            foreach (var group in groups)
            {
                options.ReplicationGroups.Add([.. group.Select(a => new Uri(a))]);
            }

            configure?.Invoke(options);
        }, name);

    private static JsonElement Json(string reply) => JsonDocument.Parse(reply).RootElement;

    [Fact]
    public async Task GroupOfTwo_FirstNodeRefusesConnections_TheSecondServes_OnceAndBecomesCurrent()
    {
        var closed = ClosedPortAddress();
        await using var host = Start(closed, [[closed, B]]);

        var first = await host.PostAsync("x");
        var second = await host.PostAsync("y");

        Assert.Equal(1, Json(first).GetProperty("seq").GetInt64());
        Assert.Equal(2, Json(second).GetProperty("seq").GetInt64());
        Assert.Equal(1, _service.Executions["x"]);
        Assert.Equal(B, host.Client.Groups.Groups.Single().Current);

        // The session's start found the closed port refusing and went on to b; from then on every attempt goes to b first.
        Assert.Equal([closed, B, B, B], _nodes.Attempts);
        Assert.Equal([("s1", 1L), ("s1", 2L)], _service.Received);
    }

    [Fact]
    public async Task NodeAnswers503Replica_PassedOverWithTheSameSessionAndNumber_RunsOnce()
    {
        _nodes.Replica.Add(B);
        await using var host = Start(A, [[A, B]]);
        await host.PostAsync("before");

        // Failover: a is now a replica, b was promoted and serves a's sessions.
        _nodes.Replica.Clear();
        _nodes.Replica.Add(A);
        var reply = await host.PostAsync("after");

        Assert.Equal(2, Json(reply).GetProperty("seq").GetInt64());
        Assert.Equal(1, _service.Executions["after"]);
        Assert.Equal(B, host.Client.Groups.Groups.Single().Current);
        Assert.Equal([A, A, A, B], _nodes.Attempts); // start, "before", "after" at a (a replica: 503), "after" at b
        Assert.Equal([("s1", 1L), ("s1", 2L)], _service.Received); // the replica executed nothing
    }

    [Fact]
    public async Task GroupOfThree_EachChangeOfTheServingNode_IsCountedOnce_WithTheNodeThatServesNow()
    {
        const string c = "http://c.test";
        var name = "group-" + Guid.NewGuid().ToString("N")[..6];
        var changes = new ConcurrentQueue<string>();
        using var listener = new System.Diagnostics.Metrics.MeterListener();
        listener.InstrumentPublished = (instrument, l) =>
        {
            if (instrument is { Name: "persistentservices.client.replication.node_changes", Meter.Name: "PersistentServices.Client" })
            {
                l.EnableMeasurementEvents(instrument);
            }
        };
        listener.SetMeasurementEventCallback<long>((_, _, tags, _) =>
        {
            var tagged = tags.ToArray();
            if (tagged.Any(t => t is { Key: "client" } && (string?)t.Value == name))
            {
                changes.Enqueue((string)tagged.Single(t => t.Key == "node").Value!);
            }
        });
        listener.Start();
        _nodes.Replica.UnionWith([A, B]);
        await using var host = Start(A, [[A, B, c]], name: name);

        await host.PostAsync("one");
        await host.PostAsync("two");
        _nodes.Replica.Clear();
        _nodes.Replica.UnionWith([B, c]); // c lost the primary role; a was promoted
        var three = await host.PostAsync("three");

        Assert.Equal(3, Json(three).GetProperty("seq").GetInt64());
        Assert.Equal([A, B, c, c, c, c, A], _nodes.Attempts); // the session's start went around to c; "three" passed c over
        Assert.Equal([c, A], changes);
        Assert.Equal(A, host.Client.Groups.Groups.Single().Current);
    }

    [Theory]
    [InlineData("reply-pending")] // the primary waits for its replicas: the same request is asked again there
    [InlineData("unavailable")]   // the primary recovers or stops
    public async Task NodeAnswers503OfAnotherType_NotPassedOver_RetriedAtTheSameNode(string type)
    {
        await using var host = Start(A, [[A, B]]);
        await host.PostAsync("before");
        _service.UnavailableType = type;
        _service.UnavailableNext = 2;

        var reply = await host.PostAsync("held");

        Assert.Equal(2, Json(reply).GetProperty("seq").GetInt64());
        Assert.Equal(1, _service.Executions["held"]);
        Assert.DoesNotContain(B, _nodes.Attempts);
        Assert.Equal(A, host.Client.Groups.Groups.Single().Current);
    }

    [Fact]
    public async Task NoNodeServes_EachRetryOfThePipelineGoesOnceAroundTheGroup_UntilOneServes()
    {
        _nodes.Replica.Add(A);
        _nodes.Replica.Add(B);
        _nodes.ReplicaUntilAttempt[B] = 3; // b is promoted after its second answer as a replica
        await using var host = Start(A, [[A, B]]);

        var reply = await host.PostAsync("failover");

        Assert.Equal(1, Json(reply).GetProperty("seq").GetInt64());
        Assert.Equal(1, _service.Executions["failover"]);
        Assert.Equal([A, B, A, B, A, B, B], _nodes.Attempts); // the session's start: three rounds; then its request at b
        Assert.Equal(B, host.Client.Groups.Groups.Single().Current);
    }

    [Fact]
    public async Task NodeThatDoesNotAnswer_TheNextAttemptStartsAtTheNextNode()
    {
        _nodes.Silent.Add(A);
        await using var host = Start(A, [[A, B]], o => o.AttemptTimeout = TimeSpan.FromMilliseconds(200));

        var reply = await host.PostAsync("slow");

        Assert.Equal(1, Json(reply).GetProperty("seq").GetInt64());
        Assert.Equal([A, B, B], _nodes.Attempts); // a timed out; the pipeline's retry went to b
        Assert.Equal(B, host.Client.Groups.Groups.Single().Current);
    }

    [Fact]
    public async Task AddressOutsideAnyGroup_IsSentAsItIs_NeverToAGroupsNodes()
    {
        const string other = "http://c.test";
        _nodes.Replica.Add(other);
        await using var host = Start(other, [[A, B]], o => o.MaxRetryAttempts = 2);

        await Assert.ThrowsAsync<HttpRequestException>(() => host.PostAsync("elsewhere"));

        Assert.Equal([other, other, other], _nodes.Attempts); // its session's start, three times: no other node
        Assert.All(host.Client.Groups.Groups, g => Assert.Null(g.Current));
    }

    [Fact]
    public async Task RequestToAnotherNodeOfTheGroup_GoesToTheCurrentNode_WithItsPathAndQuery()
    {
        _nodes.Replica.Add(A);
        await using var host = Start(B, [[A, B]]);
        await host.PostAsync("first");

        using var request = new HttpRequestMessage(HttpMethod.Post, A + "/op?q=1") { Content = new StringContent("second") };
        using var response = await host.Http.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(1, _service.Executions["second"]);
        Assert.Equal([B, B, B, B], _nodes.Attempts); // b's session and request; a's (its own pool, as any service address): at b
        Assert.Equal("/op?q=1", _nodes.LastPathAndQuery);
    }

    public static TheoryData<string[][], string> InvalidGroups => new()
    {
        { [["http://a:1"]], "ReplicationGroups[0] must list at least 2" },
        { [["http://a:1", "ftp://b:2"]], "ReplicationGroups[0][1] must be an absolute http or https address" },
        { [["http://a:1", "http://b:2/orders"]], "ReplicationGroups[0][1] must be a base address" },
        { [["http://a:1", "http://b:2?x=1"]], "ReplicationGroups[0][1] must be a base address" },
        { [["http://a:1", "http://A:1/"]], "ReplicationGroups[0] lists http://a:1 twice" },
        { [["http://a:1", "http://b:2"], ["http://c:3", "http://b:2"]], "ReplicationGroups[1] and [0] both list http://b:2" },
    };

    [Theory]
    [MemberData(nameof(InvalidGroups))]
    public void Options_InvalidReplicationGroups_AreRefusedNamingTheOption(string[][] groups, string expected)
    {
        var options = new PersistentClientOptions { StoreDirectory = _dir.Path };
        foreach (var group in groups)
        {
            options.ReplicationGroups.Add([.. group.Select(a => new Uri(a, UriKind.RelativeOrAbsolute))]);
        }

        var result = new PersistentClientOptionsValidator().Validate("orders", options);

        Assert.True(result.Failed);
        var failure = Assert.Single(result.Failures!);
        Assert.Contains("PersistentClientOptions." + expected, failure, StringComparison.Ordinal);
        Assert.Contains("(client 'orders')", failure, StringComparison.Ordinal);
    }

    [Fact]
    public void Options_RelativeOrEmptyNodeAddress_IsRefused()
    {
        var options = new PersistentClientOptions { StoreDirectory = _dir.Path };
        options.ReplicationGroups.Add([new Uri("/relative", UriKind.Relative), null!]);

        var failures = options.Validate().ToList();

        Assert.Equal(2, failures.Count);
        Assert.Contains("ReplicationGroups[0][0] must be an absolute http or https address", failures[0], StringComparison.Ordinal);
        Assert.Contains("ReplicationGroups[0][1] is empty", failures[1], StringComparison.Ordinal);
    }

    [Fact]
    public async Task Options_InvalidReplicationGroup_StopsTheClientFromStarting()
    {
        var services = new ServiceCollection();
        services.AddHttpClient("svc").AddPersistentSessions(o =>
        {
            o.StoreDirectory = _dir.Path;
            o.ReplicationGroups.Add([new Uri("http://a:1")]);
        });
        await using var provider = services.BuildServiceProvider();

        var error = Assert.Throws<OptionsValidationException>(() => provider.GetRequiredService<IOptionsMonitor<PersistentClientOptions>>().Get("svc"));

        Assert.Contains("ReplicationGroups[0]", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Options_ValidGroups_PassAndBindFromConfiguration()
    {
        var configuration = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["Client:StoreDirectory"] = _dir.Path,
            ["Client:ReplicationGroups:0:0"] = "http://orders-0:8080",
            ["Client:ReplicationGroups:0:1"] = "http://orders-1:8080/",
            ["Client:ReplicationGroups:0:2"] = "https://orders-2",
            ["Client:ReplicationGroups:1:0"] = "http://stock-0:8080",
            ["Client:ReplicationGroups:1:1"] = "http://stock-1:8080",
        }).Build();
        var options = new PersistentClientOptions();

        configuration.GetSection("Client").Bind(options);

        Assert.Empty(options.Validate());
        Assert.Equal(2, options.ReplicationGroups.Count);
        Assert.Equal([new Uri("http://orders-0:8080"), new Uri("http://orders-1:8080"), new Uri("https://orders-2")], options.ReplicationGroups[0]);
        Assert.Equal(2, options.ReplicationGroups[1].Count);
    }

    /// <summary>An address on 127.0.0.1 whose port nothing listens on: a real connection there is refused.</summary>
    private static string ClosedPortAddress()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        return $"http://127.0.0.1:{port}";
    }

    /// <summary>
    /// The client's primary handler: the nodes of the test's groups. Addresses on 127.0.0.1 go to the network (a real
    /// connection, refused at a closed port); the others to the shared fake service, unless the node is a replica (503
    /// problem <c>replica</c>, as ProtocolProblems writes it) or silent (answers nothing until the attempt is cancelled).
    /// </summary>
    private sealed class Nodes(FakeSessionServer service) : HttpMessageHandler
    {
        private readonly HttpMessageInvoker _service = new(service, disposeHandler: false);
        private readonly HttpMessageInvoker _network = new(new SocketsHttpHandler(), disposeHandler: true);
        private readonly ConcurrentDictionary<string, int> _attemptsPerNode = new();

        public ConcurrentQueue<string> AttemptQueue { get; } = new();

        public List<string> Attempts => [.. AttemptQueue];

        public HashSet<string> Replica { get; } = [];

        /// <summary>A replica answers as one until its attempt with this number (1-based), then serves (it was promoted).</summary>
        public Dictionary<string, int> ReplicaUntilAttempt { get; } = [];

        public HashSet<string> Silent { get; } = [];

        public string? LastPathAndQuery { get; private set; }

        protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            var node = request.RequestUri!.GetLeftPart(UriPartial.Authority);
            AttemptQueue.Enqueue(node);
            var attempt = _attemptsPerNode.AddOrUpdate(node, 1, (_, n) => n + 1);
            LastPathAndQuery = request.RequestUri.PathAndQuery;
            if (request.RequestUri.Host == "127.0.0.1")
            {
                return await _network.SendAsync(request, cancellationToken);
            }

            if (Silent.Contains(node))
            {
                await Task.Delay(Timeout.Infinite, cancellationToken);
            }

            if (Replica.Contains(node) && (!ReplicaUntilAttempt.TryGetValue(node, out var until) || attempt < until))
            {
                var problem = new HttpResponseMessage(HttpStatusCode.ServiceUnavailable)
                {
                    Content = new StringContent(
                        $"{{\"type\":\"{PersistentSessionClient.ProblemPrefix}replica\",\"title\":\"A replica\",\"status\":503,\"detail\":\"This node is a replica.\"}}",
                        Encoding.UTF8, "application/problem+json"),
                };
                problem.Headers.RetryAfter = new RetryConditionHeaderValue(TimeSpan.Zero);
                return problem;
            }

            return await _service.SendAsync(request, cancellationToken);
        }

        protected override void Dispose(bool disposing)
        {
            if (disposing)
            {
                _service.Dispose();
                _network.Dispose();
            }

            base.Dispose(disposing);
        }
    }
}
