using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>The test app on Kestrel at 127.0.0.1 (a random port), over a given log directory.</summary>
internal sealed class TestServer : IAsyncDisposable
{
    private readonly string _logDirectory;
    private string? _crashImage;

    private TestServer(WebApplication app, HttpClient client, string logDirectory)
    {
        App = app;
        Behavior = app.Services.GetRequiredService<TestBehavior>();
        Client = client;
        _logDirectory = logDirectory;
    }

    public WebApplication App { get; }

    public HttpClient Client { get; }

    /// <summary>The test endpoints' switches and counters in this app: the one the test passed, or a new one.</summary>
    public TestBehavior Behavior { get; }

    public PersistentRuntime Runtime => App.Services.GetRequiredService<PersistentRuntime>();

    public ServiceAvailability Availability => App.Services.GetRequiredService<ServiceAvailability>();

    public Task RecoveryCompletion => App.Services.GetRequiredService<RecoveryHostedService>().Completion;

    public static async Task<TestServer> StartAsync(string logDirectory, Action<PersistentServicesOptions>? configure = null, TimeProvider? time = null,
        Action<WebApplicationBuilder>? build = null, Action<Microsoft.AspNetCore.Builder.IEndpointConventionBuilder>? sessionEndpoints = null,
        Action<WebApplication>? beforePersistentServices = null, TestBehavior? behavior = null)
    {
        var app = Build(logDirectory, configure, time, build, sessionEndpoints, beforePersistentServices, behavior);
        await app.StartAsync(TestContext.Current.CancellationToken);
        var client = new HttpClient { BaseAddress = new Uri(app.Urls.First()) };
        return new TestServer(app, client, logDirectory);
    }

    /// <summary>
    /// Starts the app without waiting for the host's start to finish (it waits for recovery's analysis): returns once the
    /// server listens, with the host's start still running.
    /// </summary>
    public static async Task<(TestServer Server, Task Started)> StartListeningAsync(string logDirectory, Action<PersistentServicesOptions>? configure = null,
        TestBehavior? behavior = null)
    {
        var app = Build(logDirectory, configure, time: null, build: null, sessionEndpoints: null, beforePersistentServices: null, behavior);
        var started = app.StartAsync(TestContext.Current.CancellationToken);
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (app.Urls.All(url => url.EndsWith(":0", StringComparison.Ordinal)))
        {
            Assert.True(DateTime.UtcNow < deadline, "the server did not listen within 30 s");
            if (started.IsCompleted)
            {
                await started;
            }

            await Task.Delay(10, TestContext.Current.CancellationToken);
        }

        var client = new HttpClient { BaseAddress = new Uri(app.Urls.First()) };
        return (new TestServer(app, client, logDirectory), started);
    }

    private static WebApplication Build(string logDirectory, Action<PersistentServicesOptions>? configure, TimeProvider? time,
        Action<WebApplicationBuilder>? build, Action<Microsoft.AspNetCore.Builder.IEndpointConventionBuilder>? sessionEndpoints,
        Action<WebApplication>? beforePersistentServices, TestBehavior? behavior)
    {
        var builder = WebApplication.CreateBuilder();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Logging.ClearProviders();
        if (Environment.GetEnvironmentVariable("PS_TEST_LOG_FILE") is { Length: > 0 } logFile)
        {
            builder.Logging.AddProvider(new FileLoggerProvider(logFile));
            builder.Logging.SetMinimumLevel(LogLevel.Debug);
        }
        builder.Services.AddPersistentServices(options =>
        {
            options.LogDirectory = logDirectory;
            options.Log.PageSizeBits = 20;
            options.Log.MemorySizeBits = 22;
            options.MaxRequestBodyBytes = 64 * 1024;
            options.RecoveryFailureExitCode = null;
            configure?.Invoke(options);
        });
        if (time is not null)
        {
            builder.Services.Replace(ServiceDescriptor.Singleton(time));
        }

        TestApp.AddServices(builder.Services, behavior ?? new TestBehavior());
        build?.Invoke(builder);
        var app = builder.Build();
        TestApp.Configure(app, sessionEndpoints, beforePersistentServices);
        return app;
    }

    public async Task<string> StartSessionAsync(string? user = null)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/ps/sessions");
        if (user is not null)
        {
            request.Headers.Add("X-Test-User", user);
        }

        using var response = await Client.SendAsync(request, TestContext.Current.CancellationToken);
        Assert.Equal(System.Net.HttpStatusCode.Created, response.StatusCode);
        var body = await response.Content.ReadFromJsonAsync<JsonElement>(TestContext.Current.CancellationToken);
        return body.GetProperty("sessionId").GetString()!;
    }

    public static HttpRequestMessage Request(HttpMethod method, string path, string? session, long? sequence, object? json = null, string? user = null)
    {
        var request = new HttpRequestMessage(method, path);
        if (session is not null)
        {
            request.Headers.TryAddWithoutValidation("PS-Session", session);
        }

        if (sequence is { } seq)
        {
            request.Headers.TryAddWithoutValidation("PS-Seq", seq.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        if (user is not null)
        {
            request.Headers.Add("X-Test-User", user);
        }

        if (json is not null)
        {
            request.Content = JsonContent.Create(json, mediaType: new MediaTypeHeaderValue("application/json"));
        }

        return request;
    }

    public async Task<(HttpResponseMessage Response, JsonElement Body)> SendAsync(HttpMethod method, string path, string? session, long? sequence, object? json = null, string? user = null)
    {
        using var request = Request(method, path, session, sequence, json, user);
        var response = await Client.SendAsync(request, TestContext.Current.CancellationToken);
        var text = await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
        var isJson = response.Content.Headers.ContentType?.MediaType?.EndsWith("json", StringComparison.Ordinal) == true;
        var body = text.Length == 0 || !isJson ? default : JsonDocument.Parse(text).RootElement.Clone();
        return (response, body);
    }

    /// <summary>
    /// Runs <paramref name="read"/> as a plain request of this server would: with its shared state entered
    /// (<see cref="SharedStateStore.Enter"/>), so shared variables read this server's values, not another's in the test process.
    /// </summary>
    public T Shared<T>(Func<T> read)
    {
        using (SharedStateStore.Enter(Runtime.Shared))
        {
            return read();
        }
    }

    public Session Session(string id) => Runtime.Sessions.TryGet(SessionId.TryParse(id, out var sid) ? sid : default, out var s) ? s : throw new KeyNotFoundException(id);

    /// <summary>
    /// A crash as SIGKILL leaves it: the log directory as it is now (what is durable is in its files) replaces whatever the
    /// server writes afterwards, so its graceful stop (the drain and its checkpoints) never happened for the next start.
    /// </summary>
    public async Task CrashAsync()
    {
        var log = Runtime.Log;
        if (log.TailAddress > log.DurableUntil)
        {
            await log.WaitUntilDurableAsync(log.TailAddress - 1, CancellationToken.None);
        }

        _crashImage = _logDirectory + ".crash-" + Guid.NewGuid().ToString("N")[..6];
        Directory.CreateDirectory(_crashImage);
        foreach (var file in Directory.GetFiles(_logDirectory))
        {
            if (Path.GetFileName(file) != "directory.lock")
            {
                File.Copy(file, Path.Combine(_crashImage, Path.GetFileName(file)));
            }
        }

        await DisposeAsync();
    }

    public async ValueTask DisposeAsync()
    {
        if (_disposed)
        {
            return;
        }

        _disposed = true;
        Client.Dispose();
        await App.StopAsync(CancellationToken.None);
        await App.DisposeAsync();
        if (_crashImage is not null)
        {
            Directory.Delete(_logDirectory, recursive: true);
            Directory.Move(_crashImage, _logDirectory);
        }
    }

    private bool _disposed;
}
