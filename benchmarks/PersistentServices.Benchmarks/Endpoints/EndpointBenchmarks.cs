using System.Globalization;
using System.Net.Http.Json;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Jobs;
using BenchmarkDotNet.Toolchains.InProcess.Emit;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Mvc.Testing;

namespace PersistentServices.Benchmarks.Endpoints;

/// <summary>
/// The template for benchmarking your own endpoint (docs/benchmarks.md "Benchmark your own endpoint"): starts the
/// application in process, its own Program.cs, through <see cref="WebApplicationFactory{TEntryPoint}"/> (TestServer), on a
/// temporary log, and measures a persistent endpoint against a plain one (the baseline: the Ratio column) and a read-only
/// one. Here the application is samples/PersistentServices.Sample; in your benchmark project reference
/// your service's project and change the entry point type and the three requests.
/// </summary>
[Config(typeof(Config))]
[MemoryDiagnoser]
public class EndpointBenchmarks
{
    private string _log = null!;
    private WebApplicationFactory<Sample.CounterSession> _factory = null!;
    private HttpClient _client = null!;
    private string _session = null!;
    private long _sequence;

    [GlobalSetup]
    public void Setup() => SetupAsync().GetAwaiter().GetResult();

    [GlobalCleanup]
    public void Cleanup()
    {
        _client.Dispose();
        _factory.DisposeAsync().AsTask().GetAwaiter().GetResult();
        Directory.Delete(_log, recursive: true);
    }

    /// <summary>A plain endpoint of the same application: <c>GET /</c>, a constant string.</summary>
    [Benchmark(Baseline = true)]
    public async Task<int> Plain()
    {
        using var response = await _client.GetAsync(new Uri("/", UriKind.Relative));
        response.EnsureSuccessStatusCode();
        return (await response.Content.ReadAsByteArrayAsync()).Length;
    }

    /// <summary>
    /// A <c>[Persistent]</c> MVC action: <c>POST /cart/items</c> with the session and the next number. Logged, executed,
    /// its reply logged and forced (a group commit) before it is sent. The same SKU each time, so the session's state
    /// stays one line however long the benchmark runs.
    /// </summary>
    [Benchmark]
    public async Task<int> Persistent()
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/cart/items") { Content = JsonContent.Create(new { sku = "bench", quantity = 1 }) };
        request.Headers.Add("PS-Session", _session);
        request.Headers.Add("PS-Seq", (++_sequence).ToString(CultureInfo.InvariantCulture));
        using var response = await _client.SendAsync(request);
        response.EnsureSuccessStatusCode();
        return (await response.Content.ReadAsByteArrayAsync()).Length;
    }

    /// <summary>A <c>[PersistentReadOnly]</c> action: <c>GET /cart</c> with the session; not logged, forces nothing.</summary>
    [Benchmark]
    public async Task<int> ReadOnly()
    {
        using var request = new HttpRequestMessage(HttpMethod.Get, "/cart");
        request.Headers.Add("PS-Session", _session);
        using var response = await _client.SendAsync(request);
        response.EnsureSuccessStatusCode();
        return (await response.Content.ReadAsByteArrayAsync()).Length;
    }

    private async Task SetupAsync()
    {
        _log = Directory.CreateTempSubdirectory("ps-bench-endpoint-").FullName;

        // WebApplicationFactory looks for the application's project folder as its content root, and a benchmark runs from
        // its own bin folder (the application's appsettings.json is copied there): point it at that folder.
        var app = typeof(Sample.CounterSession).Assembly.GetName().Name!;
        Environment.SetEnvironmentVariable($"ASPNETCORE_TEST_CONTENTROOT_{app.ToUpperInvariant().Replace('.', '_')}", AppContext.BaseDirectory);
        _factory = new WebApplicationFactory<Sample.CounterSession>().WithWebHostBuilder(host =>
        {
            host.UseSetting("PersistentServices:LogDirectory", _log);   // the service reads its log directory from configuration
            host.UseSetting("Logging:LogLevel:Default", "Warning");
        });

        // ASP.NET Core's TestServer: requests go through the whole pipeline in memory, without sockets, so the Ratio shows
        // what persistence adds to the server's work. (WebApplicationFactory.UseKestrel(0) would put Kestrel and loopback
        // sockets in both arms; its disposal stops hosted services after disposing them, which PersistentServices' do not
        // survive yet: docs/benchmarks.md.)
        _factory.StartServer();
        _client = _factory.CreateClient();
        using var started = await _client.PostAsync(new Uri("/ps/sessions", UriKind.Relative), null);
        started.EnsureSuccessStatusCode();
        _session = started.Headers.GetValues("PS-Session").Single();
        _sequence = 0;
    }

    private sealed class Config : ManualConfig
    {
        public Config()
        {
            // In process: the server lives in the benchmark's process (BenchmarkDotNet's default would start another).
            // 15 measured iterations: ShortRun's 3 give a useless error margin on a shared 2-core machine.
            AddJob(Job.Default.WithToolchain(InProcessEmitToolchain.Instance).WithWarmupCount(5).WithIterationCount(15).WithId("InProcess15"));
        }
    }
}
