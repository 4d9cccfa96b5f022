using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>
/// PS0202 and HTTP clients registered with <c>AddPersistentCalls()</c> (docs/calls.md): sends through them are persistent
/// calls (logged, deduplicated, answered from the log in replay), so they are not reported where the analyzer can see
/// the registration in the same compilation; every other send still is.
/// </summary>
public sealed class PersistentCallClientTests
{
    private const string Usings = """
        using System.Net.Http;
        using System.Net.Http.Json;
        using System.Threading.Tasks;
        using Microsoft.AspNetCore.Builder;
        using Microsoft.AspNetCore.Http;
        using Microsoft.Extensions.DependencyInjection;

        """;

    private const string Registrations = """
        var builder = WebApplication.CreateBuilder(args);
        builder.Services.AddPersistentServices(o => o.LogDirectory = "data/log");
        builder.Services.AddHttpClient("bank", c => c.BaseAddress = new System.Uri("http://127.0.0.1:9")).AddPersistentCalls();
        builder.Services.AddHttpClient(Names.Tax).ConfigureHttpClient(c => c.Timeout = System.TimeSpan.FromSeconds(5)).AddPersistentCalls();
        builder.Services.AddHttpClient("plain");
        builder.Services.AddHttpClient<StoreClient>().AddPersistentCalls();
        builder.Services.AddHttpClient<IShipping, ShippingClient>().AddPersistentCalls();
        builder.Services.AddHttpClient<FieldClient>().AddPersistentCalls();
        builder.Services.AddHttpClient<PlainClient>();
        var app = builder.Build();
        app.UsePersistentServices();

        """;

    private const string Types = """

        internal static class Names
        {
            public const string Tax = "tax";
        }

        public sealed class StoreClient(HttpClient http)
        {
            public Task<string> ReserveAsync(string book) => http.GetStringAsync("/reserve/" + book);

            public async Task<int> CountAsync() => await http.GetFromJsonAsync<int>("/count");
        }

        public interface IShipping
        {
            Task<HttpResponseMessage> ShipAsync(string order);
        }

        public sealed class ShippingClient(HttpClient http) : IShipping
        {
            public Task<HttpResponseMessage> ShipAsync(string order) => http.PostAsJsonAsync("/ship", order);
        }

        public sealed class FieldClient
        {
            private readonly HttpClient _http;

            public FieldClient(HttpClient http) => _http = http;

            public HttpClient Other { get; set; } = new();

            public Task<string> GetAsync() => _http.GetStringAsync("/x");

            public Task<string> OtherAsync() => Other.GetStringAsync("/y");
        }

        public sealed class PlainClient(HttpClient http)
        {
            public Task<string> GetAsync() => http.GetStringAsync("/x");
        }
        """;

    public static TheoryData<string, string> NotReported => new()
    {
        {
            "a named client from CreateClient(\"bank\"), through a local, as the test service's /pay",
            """
            app.MapPost("/pay", [Persistent] async (IHttpClientFactory clients) =>
            {
                var bank = clients.CreateClient("bank");
                var fee = await bank.GetFromJsonAsync<int>("/fee");
                var credit = await bank.PostAsJsonAsync("/credit", fee);
                return await bank.GetStringAsync("/balance");
            });
            """
        },
        {
            "a named client used directly, its name a constant, its chain with ConfigureHttpClient",
            """
            app.MapPost("/tax", [Persistent] async (IHttpClientFactory clients) => await clients.CreateClient(Names.Tax).GetStringAsync("/rate"));
            """
        },
        {
            "a local assigned later, each time from a persistent client",
            """
            app.MapPost("/later", [Persistent] async (IHttpClientFactory clients) =>
            {
                HttpClient client;
                client = clients.CreateClient("bank");
                return await client.SendAsync(new HttpRequestMessage(HttpMethod.Get, "/x"));
            });
            """
        },
        {
            "a typed client (primary constructor), called from an endpoint",
            """
            app.MapPost("/reserve", [Persistent] async (StoreClient store) => await store.ReserveAsync("b1") + await store.CountAsync());
            """
        },
        {
            "a typed client behind an interface (AddHttpClient<TClient, TImplementation>)",
            """
            app.MapPost("/ship", [Persistent] async (IShipping shipping) => (await shipping.ShipAsync("o1")).StatusCode);
            """
        },
        {
            "a typed client that keeps the injected client in a readonly field",
            """
            app.MapPost("/field", [Persistent] (FieldClient client) => client.GetAsync());
            """
        },
    };

    [Theory]
    [MemberData(nameof(NotReported))]
    public async Task Analyze_SendThroughClientWithAddPersistentCalls_ReportsNothing(string context, string endpoint)
    {
        var diagnostics = await TestCompiler.AnalyzeValidApplicationAsync(Usings + Registrations + endpoint + "\napp.Run();\n" + Types);

        Assert.True(diagnostics.IsEmpty, $"{context}: expected no diagnostics, got:\n" + string.Join("\n", diagnostics));
    }

    public static TheoryData<string, string, string> Reported => new()
    {
        {
            "a named client without AddPersistentCalls()",
            """
            app.MapPost("/p", [Persistent] async (IHttpClientFactory clients) => await clients.CreateClient("plain").GetStringAsync("/x"));
            """,
            "clients.CreateClient(\"plain\").GetStringAsync(\"/x\")"
        },
        {
            "a name that is not a constant",
            """
            app.MapPost("/p", [Persistent] async (IHttpClientFactory clients, string name) => await clients.CreateClient(name).GetStringAsync("/x"));
            """,
            "clients.CreateClient(name).GetStringAsync(\"/x\")"
        },
        {
            "a name registered nowhere",
            """
            app.MapPost("/p", [Persistent] async (IHttpClientFactory clients) => await clients.CreateClient("bank2").GetStringAsync("/x"));
            """,
            "clients.CreateClient(\"bank2\").GetStringAsync(\"/x\")"
        },
        {
            "a local that may also hold another client",
            """
            app.MapPost("/p", [Persistent] async (IHttpClientFactory clients, bool b) =>
            {
                var client = clients.CreateClient("bank");
                if (b)
                {
                    client = clients.CreateClient("plain");
                }

                return await client.GetStringAsync("/x");
            });
            """,
            "client.GetStringAsync(\"/x\")"
        },
        {
            "an injected HttpClient in the endpoint",
            """
            app.MapPost("/p", [Persistent] async (HttpClient http) => await http.GetStringAsync("/x"));
            """,
            "http.GetStringAsync(\"/x\")"
        },
        {
            "a typed client without AddPersistentCalls()",
            """
            app.MapPost("/p", [Persistent] (PlainClient client) => client.GetAsync());
            """,
            "client.GetAsync()"
        },
        {
            "a settable property of a persistent typed client, not the injected client",
            """
            app.MapPost("/p", [Persistent] (FieldClient client) => client.OtherAsync());
            """,
            "client.OtherAsync()"
        },
    };

    [Theory]
    [MemberData(nameof(Reported))]
    public async Task Analyze_SendThroughOtherClient_ReportsPS0202(string context, string endpoint, string spanText)
    {
        var diagnostics = await TestCompiler.AnalyzeValidApplicationAsync(Usings + Registrations + endpoint + "\napp.Run();\n" + Types);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0202", spanText);
        Assert.Contains("without AddPersistentCalls()", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
        _ = context;
    }

    /// <summary>
    /// A client whose name is read from configuration or arguments, registered and created through the same variable (the
    /// chain sample of issue 38: <c>AddHttpClient(next, ...).AddPersistentCalls()</c>, then <c>CreateClient(next)</c>):
    /// a persistent call, not reported; a send through another variable's client still is.
    /// </summary>
    [Fact]
    public async Task Analyze_ClientNamedByAVariable_SameVariableIsNotReported_AnotherIs()
    {
        var source = Usings + """
            var next = args[0];
            var other = args[1];
            var builder = WebApplication.CreateBuilder(args);
            builder.Services.AddPersistentServices(o => o.LogDirectory = "data/log");
            builder.Services.AddHttpClient(next, c => c.BaseAddress = new System.Uri("http://127.0.0.1:9")).AddPersistentCalls();
            builder.Services.AddHttpClient(other);
            var app = builder.Build();
            app.UsePersistentServices();
            app.MapPost("/op", [Persistent] async (IHttpClientFactory clients) => await clients.CreateClient(next).GetStringAsync("/op"));
            app.MapPost("/other", [Persistent] async (IHttpClientFactory clients) => await clients.CreateClient(other).GetStringAsync("/x"));
            app.Run();
            """;

        var diagnostics = await TestCompiler.AnalyzeValidApplicationAsync(source);

        DiagnosticAssert.Single(diagnostics, "PS0202", "clients.CreateClient(other).GetStringAsync(\"/x\")");
    }

    [Fact]
    public async Task Analyze_RegistrationWithoutPersistentCallsInCompilation_ReportsEverySend()
    {
        var source = Usings + """
            var builder = WebApplication.CreateBuilder(args);
            builder.Services.AddHttpClient("bank");
            var app = builder.Build();
            app.MapPost("/pay", [Persistent] async (IHttpClientFactory clients) => await clients.CreateClient("bank").GetStringAsync("/x"));
            app.Run();
            """;

        DiagnosticAssert.Single(await TestCompiler.AnalyzeValidApplicationAsync(source), "PS0202", "clients.CreateClient(\"bank\").GetStringAsync(\"/x\")");
    }
}
