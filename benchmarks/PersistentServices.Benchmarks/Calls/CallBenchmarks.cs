using System.Globalization;
using System.Net.Http.Json;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Jobs;
using BenchmarkDotNet.Toolchains.InProcess.Emit;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace PersistentServices.Benchmarks.Calls;

/// <summary>
/// One call between two persistent services, by the callee's role, beside a plain <see cref="HttpClient"/> call: the
/// shape of [Phoenix/App Tables 4–5]. Two services in this process (Kestrel on 127.0.0.1, a log each): A's endpoint
/// makes <see cref="CallsPerRequest"/> sequential calls to B and the time per call is reported, from inside A as the
/// paper measured (A's own request and its reply force are spread over the calls). Rows:
/// <list type="bullet">
/// <item><c>ExternalToPlain</c>, <c>ExternalToPersistent</c>: the benchmark (an external client) calls B directly,
///   one request per operation (Table 4's External rows).</item>
/// <item><c>PlainToPlain</c>: a plain endpoint of A calls a plain endpoint of B through a plain HttpClient (no library).</item>
/// <item><c>PersistentToPersistent</c>, <c>…ToReadOnly</c>, <c>…ToFunctional</c>: A's persistent endpoint calls B's
///   endpoint of that role through a client with <c>AddPersistentCalls()</c>.</item>
/// </list>
/// <see cref="Logging"/>: ForceEveryMessage is the paper's baseline, ForceBeforeEachCall its optimized logging (for
/// repeated calls to one callee the multi-call optimization forces as often). B's endpoints use no shared state.
/// </summary>
[Config(typeof(Config))]
public class CallBenchmarks : IDisposable
{
    public const int CallsPerRequest = 20;

    private const string PeerKey = "benchmark-peer-key-0123456789-abcdefghijklmnop";

    private string _root = null!;
    private WebApplication _a = null!;
    private WebApplication _b = null!;
    private HttpClient _client = null!;
    private string _sessionA = null!;
    private string _sessionB = null!;
    private long _seqA;
    private long _seqB;

    [Params(CallLogging.ForceEveryMessage, CallLogging.ForceBeforeEachCall)]
    public CallLogging Logging { get; set; }

    [GlobalSetup]
    public void Setup() => SetupAsync().GetAwaiter().GetResult();

    [GlobalCleanup]
    public void Cleanup() => CleanupAsync().GetAwaiter().GetResult();

    [Benchmark]
    public Task<long> ExternalToPlain() => PostAsync(new Uri(B, "/plain"), session: null, seq: 0);

    [Benchmark]
    public Task<long> ExternalToPersistent() => PostAsync(new Uri(B, "/persistent"), _sessionB, ++_seqB);

    [Benchmark(OperationsPerInvoke = CallsPerRequest, Baseline = true)]
    public Task<long> PlainToPlain() => PostAsync(new Uri(A, "/calls/plain"), session: null, seq: 0);

    [Benchmark(OperationsPerInvoke = CallsPerRequest)]
    public Task<long> PersistentToPersistent() => PostAsync(new Uri(A, "/calls/persistent"), _sessionA, ++_seqA);

    [Benchmark(OperationsPerInvoke = CallsPerRequest)]
    public Task<long> PersistentToReadOnly() => PostAsync(new Uri(A, "/calls/readonly"), _sessionA, ++_seqA);

    [Benchmark(OperationsPerInvoke = CallsPerRequest)]
    public Task<long> PersistentToFunctional() => PostAsync(new Uri(A, "/calls/functional"), _sessionA, ++_seqA);

    private Uri A => new(_a.Urls.First());

    private Uri B => new(_b.Urls.First());

    private async Task<long> PostAsync(Uri uri, string? session, long seq)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, uri) { Content = JsonContent.Create(new Batch(CallsPerRequest)) };
        if (session is not null)
        {
            request.Headers.Add("PS-Session", session);
            request.Headers.Add("PS-Seq", seq.ToString(CultureInfo.InvariantCulture));
        }

        using var response = await _client.SendAsync(request);
        response.EnsureSuccessStatusCode();
        return await response.Content.ReadFromJsonAsync<long>();
    }

    private async Task SetupAsync()
    {
        _root = Path.Combine(Path.GetTempPath(), "ps-bench-calls-" + Guid.NewGuid().ToString("N")[..8]);
        _b = await StartAsync("B", calleeUrl: null);
        _a = await StartAsync("A", calleeUrl: B);
        _client = new HttpClient();
        _sessionA = await StartSessionAsync(A);
        _sessionB = await StartSessionAsync(B);
        _seqA = 0;
        _seqB = 0;
    }

    private async Task<string> StartSessionAsync(Uri service)
    {
        using var response = await _client.PostAsync(new Uri(service, "/ps/sessions"), null);
        response.EnsureSuccessStatusCode();
        return response.Headers.GetValues("PS-Session").Single();
    }

    private async Task<WebApplication> StartAsync(string name, Uri? calleeUrl)
    {
        var builder = WebApplication.CreateBuilder();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Logging.ClearProviders();
        builder.Services.AddPersistentServices(o =>
        {
            o.LogDirectory = Path.Combine(_root, name);
            o.ServiceName = name;
            o.Calls.PeerKey = PeerKey;
            o.Calls.Logging = Logging;
        });
        var callee = calleeUrl ?? new Uri("http://127.0.0.1:9");
        builder.Services.AddHttpClient("b", c => c.BaseAddress = callee).AddPersistentCalls("B"); // calls are signed for the service named B
        builder.Services.AddHttpClient("plain-b", c => c.BaseAddress = callee);
        var app = builder.Build();
        app.UsePersistentServices();

        // B: the callee, one endpoint per role, each a trivial computation (no shared state).
        app.MapPost("/plain", (Batch body) => body.Count + 1L);
        app.MapPost("/persistent", [Persistent] (Batch body) => body.Count + 1L);
        app.MapPost("/readonly", [PersistentReadOnly] (Batch body) => body.Count + 1L);
        app.MapPost("/functional", [Functional] (Batch body) => body.Count + 1L);

        // A: the caller, CallsPerRequest sequential calls to one endpoint of B.
        app.MapPost("/calls/plain", async (Batch body, IHttpClientFactory clients) => await CallAsync(clients.CreateClient("plain-b"), "/plain", body.Count));
        app.MapPost("/calls/persistent", [Persistent] async (Batch body, IHttpClientFactory clients) => await CallPersistentAsync(clients, "/persistent", body.Count));
        app.MapPost("/calls/readonly", [Persistent] async (Batch body, IHttpClientFactory clients) => await CallPersistentAsync(clients, "/readonly", body.Count));
        app.MapPost("/calls/functional", [Persistent] async (Batch body, IHttpClientFactory clients) => await CallPersistentAsync(clients, "/functional", body.Count));
        await app.StartAsync();
        return app;
    }

    /// <summary>Through the client with <c>AddPersistentCalls()</c> (its name a constant, so the analyzer sees it is one).</summary>
    private static async Task<long> CallPersistentAsync(IHttpClientFactory clients, string path, int count)
    {
        var callee = clients.CreateClient("b");
        long sum = 0;
        for (var i = 0; i < count; i++)
        {
            using var reply = await callee.PostAsJsonAsync(path, new Batch(i));
            reply.EnsureSuccessStatusCode();
            sum += await reply.Content.ReadFromJsonAsync<long>();
        }

        return sum;
    }

    private static async Task<long> CallAsync(HttpClient callee, string path, int count)
    {
        long sum = 0;
        for (var i = 0; i < count; i++)
        {
            using var reply = await callee.PostAsJsonAsync(path, new Batch(i));
            reply.EnsureSuccessStatusCode();
            sum += await reply.Content.ReadFromJsonAsync<long>();
        }

        return sum;
    }

    public void Dispose()
    {
        _client?.Dispose();
        GC.SuppressFinalize(this);
    }

    private async Task CleanupAsync()
    {
        _client.Dispose();
        await _a.StopAsync();
        await _a.DisposeAsync();
        await _b.StopAsync();
        await _b.DisposeAsync();
        Directory.Delete(_root, recursive: true);
    }

    public sealed record Batch(int Count);

    /// <summary>In process (it hosts two servers), few iterations: a loaded 2-core machine makes more precision illusory.</summary>
    private sealed class Config : ManualConfig
    {
        public Config()
        {
            AddJob(Job.ShortRun.WithToolchain(InProcessEmitToolchain.Instance).WithId("InProcessShort"));
        }
    }
}
