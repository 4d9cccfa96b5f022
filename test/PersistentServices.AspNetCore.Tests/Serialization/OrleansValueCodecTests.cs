using System.Collections.Immutable;
using System.Text.Json;
using Orleans;
using PersistentServices.Log.Records;
using PersistentServices.Serialization;

namespace PersistentServices.AspNetCore.Tests.Serialization;

public sealed record CartV1(string Name, int Count);

public sealed record CartV2(string Name, int Count, string? Coupon);

public sealed record CartV0(string Name);

[GenerateSerializer]
public sealed record Compact([property: Id(0)] string Name, [property: Id(1)] long Total);

public sealed class OrleansValueCodecTests
{
    private readonly OrleansValueCodec _codec = new();

    [Fact]
    public void Encode_TypeWithoutOrleansAttributes_IsPlainJson_AndAddedOrRemovedPropertiesStillRead()
    {
        var (bytes, format) = _codec.Encode(new CartV1("a", 3));

        Assert.Equal(ValueFormat.Json, format);
        Assert.Equal("""{"Name":"a","Count":3}""", System.Text.Encoding.UTF8.GetString(bytes));
        Assert.Equal(new CartV2("a", 3, null), _codec.Deserialize<CartV2>(bytes, format)); // a later build added a property
        Assert.Equal(new CartV0("a"), _codec.Deserialize<CartV0>(bytes, format));          // or removed one
    }

    [Fact]
    public void Encode_GenerateSerializerTypeAndPrimitives_UseOrleans_AndRoundTrip()
    {
        var (bytes, format) = _codec.Encode(new Compact("x", 42));
        Assert.Equal(ValueFormat.Orleans, format);
        Assert.Equal(new Compact("x", 42), _codec.Deserialize<Compact>(bytes, format));

        var (number, numberFormat) = _codec.Encode(42L);
        Assert.Equal(ValueFormat.Orleans, numberFormat);
        Assert.True(number.Length <= 4);
        Assert.Equal(42L, _codec.Deserialize<long>(number, numberFormat));
        Assert.Null(_codec.Deserialize<string?>(_codec.Encode<string?>(null).Bytes, ValueFormat.Orleans));
    }

    [Fact]
    public void Deserialize_JsonWrittenByEarlierBuilds_Reads()
    {
        var legacy = JsonSerializer.SerializeToUtf8Bytes(ImmutableList.Create("a", "b"));
        Assert.Equal(["a", "b"], _codec.Deserialize<ImmutableList<string>>(legacy, ValueFormat.Json));
        Assert.Equal(7L, _codec.Deserialize<long>("7"u8, ValueFormat.Json));
    }

    [Fact]
    public void Deserialize_AValueThatNoLongerFitsTheType_ThrowsValueFormatException()
    {
        var (bytes, format) = _codec.Encode("not a number");
        Assert.Throws<ValueFormatException>(() => _codec.Deserialize<long>(bytes, format));
        Assert.Throws<ValueFormatException>(() => _codec.Deserialize<long>("\"abc\""u8, ValueFormat.Json));
    }
}
