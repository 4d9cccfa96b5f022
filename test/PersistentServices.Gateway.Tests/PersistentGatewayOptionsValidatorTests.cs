namespace PersistentServices.Gateway.Tests;

/// <summary>The options are validated at startup, with messages that name the option.</summary>
public sealed class PersistentGatewayOptionsValidatorTests
{
    private static PersistentGatewayOptions Valid()
    {
        var options = new PersistentGatewayOptions { PeerKey = "validator-tests-peer-key-0123456789abc" };
        options.Services["store"] = new GatewayServiceOptions { Persistent = true };
        options.Services["store"].Instances["0"] = "http://127.0.0.1:5001";
        options.Services["store"].Instances["2"] = "http://store-2.store:8080";
        return options;
    }

    [Fact]
    public void NoPeerKey_IsValid_WhenNoServiceIsPersistent()
    {
        var options = Valid();
        options.PeerKey = null;
        options.Services["store"].Persistent = false;

        Assert.True(new PersistentGatewayOptionsValidator().Validate(null, options).Succeeded);
    }

    [Fact]
    public void Valid_Succeeds()
    {
        var result = new PersistentGatewayOptionsValidator().Validate(null, Valid());

        Assert.True(result.Succeeded, string.Join("\n", result.Failures ?? []));
    }

    [Theory]
    [InlineData("no-services", "PersistentGateway:Services must name at least one service")]
    [InlineData("no-instances", "PersistentGateway:Services:store:Instances must list at least one instance")]
    [InlineData("ordinal-256", "'256' is not an instance ordinal (0 to 255)")]
    [InlineData("ordinal-negative", "'-1' is not an instance ordinal (0 to 255)")]
    [InlineData("address", "PersistentGateway:Services:store:Instances:0 must be an absolute http or https address")]
    [InlineData("prefix", "PersistentGateway:Services:store:PathPrefix must start with '/'")]
    [InlineData("same-prefix", "PathPrefix '' is also the prefix of service")]
    [InlineData("hold", "PersistentGateway:HoldTime must be positive")]
    [InlineData("retry", "PersistentGateway:RetryDelay must be positive and at most MaxRetryDelay")]
    [InlineData("buffer", "PersistentGateway:MaxBufferedBytes must be at least MaxRequestBodyBytes")]
    [InlineData("per-client-small", "PersistentGateway:MaxBufferedBytesPerClient must be at least MaxRequestBodyBytes")]
    [InlineData("per-client-large", "PersistentGateway:MaxBufferedBytesPerClient must be at least MaxRequestBodyBytes (1048576) and at most MaxBufferedBytes")]
    [InlineData("draining-unknown", "DrainingInstances: '5' is not one of the service's Instances")]
    [InlineData("draining-all", "DrainingInstances lists every instance")]
    [InlineData("plain", "PersistentGateway:Services:store:PlainPaths must start with '/'")]
    [InlineData("no-peer-key", "PersistentGateway:PeerKey must be set")]
    [InlineData("short-peer-key", "PersistentGateway:PeerKey must have at least 32 characters")]
    [InlineData("body-rate", "PersistentGateway:MinRequestBodyDataRate must be positive")]
    public void Invalid_IsRefused_NamingTheOption(string which, string message)
    {
        var options = Valid();
        var store = options.Services["store"];
        switch (which)
        {
            case "no-services": options.Services.Clear(); break;
            case "no-instances": store.Instances.Clear(); break;
            case "ordinal-256": store.Instances["256"] = "http://127.0.0.1:1"; break;
            case "ordinal-negative": store.Instances["-1"] = "http://127.0.0.1:1"; break;
            case "address": store.Instances["0"] = "127.0.0.1:5001"; break;
            case "prefix": store.PathPrefix = "store/"; break;
            case "same-prefix":
                options.Services["other"] = new GatewayServiceOptions();
                options.Services["other"].Instances["0"] = "http://127.0.0.1:1";
                break;
            case "hold": options.HoldTime = TimeSpan.Zero; break;
            case "retry": options.MaxRetryDelay = TimeSpan.FromMilliseconds(1); break;
            case "buffer": options.MaxBufferedBytes = 10; break;
            case "per-client-small": options.MaxBufferedBytesPerClient = 10; break;
            case "per-client-large": options.MaxBufferedBytesPerClient = options.MaxBufferedBytes + 1; break;
            case "draining-unknown": store.DrainingInstances.Add("5"); break;
            case "draining-all": store.DrainingInstances.AddRange(["0", "2"]); break;
            case "no-peer-key": options.PeerKey = null; break;
            case "short-peer-key": options.PeerKey = "short"; break;
            case "body-rate": options.MinRequestBodyDataRate = 0; break;
            default: store.PlainPaths.Add("plain"); break;
        }

        var result = new PersistentGatewayOptionsValidator().Validate(null, options);

        Assert.True(result.Failed);
        Assert.Contains(result.Failures!, f => f.Contains(message, StringComparison.Ordinal));
    }
}
