using Microsoft.Extensions.DependencyInjection;

namespace PersistentServices.Client.Tests;

internal sealed class TempDirectory : IDisposable
{
    public string Path { get; } = System.IO.Path.Combine(System.IO.Path.GetTempPath(), "ps-client-" + Guid.NewGuid().ToString("N")[..8]);

    public void Dispose()
    {
        try
        {
            Directory.Delete(Path, recursive: true);
        }
        catch (DirectoryNotFoundException)
        {
        }
    }
}

/// <summary>A DI container with the named client "svc" over the fake server, as an application configures it.</summary>
internal sealed class ClientHost(ServiceProvider services, string name = "svc") : IAsyncDisposable
{
    public static ClientHost Start(string store, FakeSessionServer server, Action<PersistentClientOptions>? configure = null, string name = "svc")
        => Start(store, server, new Uri("http://svc.test"), configure, name);

    /// <summary>The same with <paramref name="primary"/> as the client's primary handler and <paramref name="baseAddress"/> as its base address.</summary>
    public static ClientHost Start(string store, HttpMessageHandler primary, Uri baseAddress, Action<PersistentClientOptions>? configure = null, string name = "svc")
    {
        var server = primary;
        var services = new ServiceCollection();
        services.AddHttpClient(name, client => client.BaseAddress = baseAddress)
            .AddPersistentSessions(options =>
            {
                options.StoreDirectory = store;
                options.RetryDelay = TimeSpan.FromMilliseconds(1);
                options.MaxRetryDelay = TimeSpan.FromMilliseconds(5);
                configure?.Invoke(options);
            })
            .ConfigurePrimaryHttpMessageHandler(() => server);
        return new ClientHost(services.BuildServiceProvider(), name);
    }

    public HttpClient Http => services.GetRequiredService<IHttpClientFactory>().CreateClient(name);

    public PersistentSessionClient Client => services.GetRequiredKeyedService<PersistentSessionClient>(name);

    public async Task<string> PostAsync(string body, string? operationId = null)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/op") { Content = new StringContent(body) };
        if (operationId is not null)
        {
            request.Options.Set(PersistentRequestOptions.OperationId, operationId);
        }

        using var response = await Http.SendAsync(request, TestContext.Current.CancellationToken);
        return await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
    }

    /// <summary>As a host stops: its hosted services stop (the client ends its idle sessions), then the provider is disposed.</summary>
    public async ValueTask DisposeAsync()
    {
        foreach (var hosted in services.GetServices<Microsoft.Extensions.Hosting.IHostedService>().Reverse())
        {
            await hosted.StopAsync(CancellationToken.None);
        }

        await services.DisposeAsync();
    }
}
